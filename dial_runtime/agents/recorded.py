"""An agent that replays the replies of a recorded conversation, for regression tests, demos and evaluation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..runtime.events import LogEntry, event_from_dict
from ..views.agent import exchanges
from .scripted import ScriptedAgent

__all__ = ["RecordedAgent"]


class RecordedAgent(ScriptedAgent):
    """Replies with the recorded replies in order and records every message it was sent in ``sent``.

    ``expected`` holds the messages the recorded conversation sent (empty when built from bare replies), so a
    replay can check that the runtime still sends what it sent then: ``agent.sent == list(agent.expected)``.
    When the replies run out it raises ``LookupError``, which ``say`` re-raises like any failed send.
    """

    exhausted = "no recorded reply left"

    def __init__(self, replies: Iterable[str], *, expected: Iterable[str] = ()) -> None:
        super().__init__(replies)
        self.expected = tuple(expected)

    @classmethod
    def from_log(cls, entries: Iterable[Any]) -> RecordedAgent:
        """The agent that replays a conversation's log: the ``text`` of its ``reply`` events, in order.

        ``entries`` are :class:`~dial_runtime.LogEntry` records, events, or their JSON forms (what
        ``entry_to_dict`` and ``event_to_dict`` give); ``TypeError`` names anything else.
        """
        sent = exchanges(_event(item) for item in entries)
        replies = [each.reply for each in sent if each.reply is not None]
        return cls(replies, expected=[each.message for each in sent])


def _event(item: Any) -> Any:
    """The event of a log entry, an event, or the JSON form of either."""
    if isinstance(item, LogEntry):
        return item.event
    if isinstance(item, Mapping):
        event = item.get("event", item)
        if isinstance(event, Mapping) and "type" in event:
            return event_from_dict(event)
    elif isinstance(getattr(item, "type", None), str):
        return item
    raise TypeError(f"RecordedAgent.from_log: expected log entries or events, got {item!r}")
