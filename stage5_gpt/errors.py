"""One exception type for every mistake a user can make.

Command-line tools catch ``UserError`` and print its message (what was wrong and
what to do) instead of a stack trace. Anything else is a bug and is allowed to
crash loudly.
"""


class UserError(ValueError):
    """Bad input from the user: a file, a flag, a prompt or a checkpoint."""
