"""Errors the user can fix: the CLI prints them as one line, without a traceback."""


class UserError(Exception):
    """A problem with the command, its files or its environment, said in one line."""
