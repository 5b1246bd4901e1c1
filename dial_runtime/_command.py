"""The failure a command of the command line reports as its one line.

Kept apart from :mod:`dial_runtime.cli`, so the command line (run as ``dial-runtime`` or as ``python -m
dial_runtime.cli``) and the modules it calls into (the web surface's ``serve``, the domain loader) raise and catch
the same class.
"""

from __future__ import annotations

from typing import NoReturn

#: The exit status of a command line that is itself wrong (argparse's too).
USAGE = 2


class _CommandError(Exception):
    """A failure the command reports as its one line; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def _usage(message: str) -> NoReturn:
    """Refuse the command line as written (exit status :data:`USAGE`)."""
    raise _CommandError(message, USAGE)


def _described(error: BaseException) -> str:
    """An exception in one line: ``TypeName: message``."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
