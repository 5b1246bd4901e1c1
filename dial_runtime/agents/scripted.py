"""An agent that answers from a list of replies: for demos, tests and benchmarks."""

from __future__ import annotations

from collections.abc import Iterable


class ScriptedAgent:
    """Replies with the given texts in order and records every message it was sent in ``sent``.

    When the script runs out it raises ``LookupError``, which ``say`` re-raises like any failed send.
    """

    #: How :meth:`send` says the script ran out.
    exhausted = "no reply left"

    def __init__(self, replies: Iterable[str]) -> None:
        self._replies = list(replies)
        self._next = 0
        self.sent: list[str] = []

    def send(self, message: str) -> str:
        """The next reply; ``message`` is kept in ``sent``."""
        self.sent.append(message)
        if self._next >= len(self._replies):
            raise LookupError(f"{type(self).__name__}: {self.exhausted} for message {len(self.sent)}")
        reply = self._replies[self._next]
        self._next += 1
        return reply
