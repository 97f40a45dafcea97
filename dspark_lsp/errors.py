"""Errors that reach the user as one clear line (CLI) or an LSP error response."""


class UserError(Exception):
    """A problem the user can fix (bad input, missing model, ...). Printed as one line, no traceback."""

    exit_code: int = 2


class ModelNotPrepared(UserError):
    """A named model is known but its weights are not in the cache yet."""


class ModelError(UserError):
    """A model could not be found, verified or loaded."""
