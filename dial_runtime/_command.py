"""The failure a command of the command line reports as its one line.

Kept apart from :mod:`dial_runtime.cli`, so the command line (run as ``dial-runtime`` or as ``python -m
dial_runtime.cli``) and the modules it calls into (the web surface's ``serve``) raise and catch the same class.
"""

from __future__ import annotations


class _CommandError(Exception):
    """A failure the command reports as its one line; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
