"""Helpers for tests and demos: tiny random models that load in well under a second."""
