"""The package."""
from .util import helper

__all__ = ["helper", "VERSION"]
VERSION = "1.2"
