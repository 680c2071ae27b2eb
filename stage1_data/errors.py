"""One exception type for every mistake a user can make, and output a user can read.

Command-line tools catch ``UserError`` and print its message (what was wrong and
what to do) instead of a stack trace. Anything else is a bug and is allowed to
crash loudly.
"""

import sys


class UserError(ValueError):
    """Bad input from the user: a file, a flag, a prompt or a checkpoint."""


def utf8_output() -> None:
    """Print UTF-8 whatever the terminal's encoding: a Windows console's (cp1252, cp936)
    cannot write every character of the corpora, and Python would stop with an error."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and stream.encoding.lower() not in ("utf-8", "utf8"):
            stream.reconfigure(encoding="utf-8", errors="replace")
