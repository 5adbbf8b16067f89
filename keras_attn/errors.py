"""Errors the user can fix: the CLI prints them as one line, without a traceback."""


class UserError(ValueError):
    """A problem with the command, its files or its environment, said in one line.

    A `ValueError`, so a library caller's `except ValueError` catches it as it catches Keras's own
    refusals of bad arguments.
    """
