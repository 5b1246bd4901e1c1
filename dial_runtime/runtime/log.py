"""A conversation's log as it is held in memory: its events and their times, numbered from 1.

The runtime appends an event for every step of a turn, and most are never looked at one by one again: the state
is folded as they come. So the log keeps the events in one list and their times in an array of doubles, and makes
the :class:`LogEntry` records only when someone asks for them (``Conversation.log``, or a write to a store),
once each. Fewer objects per event keeps both the turn and the garbage collector's rounds cheaper.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

from .events import Event, LogEntry

#: What a new log's times start as: copying it takes half the instructions of ``array("d")``.
_NO_TIMES = array("d")


class EventLog:
    """Events numbered from 1, with their wall-clock times; :meth:`entries` gives them as log entries.

    ``events`` and ``times`` grow together, through :meth:`add` and :meth:`add_entry`.
    """

    __slots__ = ("_entries", "events", "times")

    def __init__(self, entries: Iterable[LogEntry] = ()) -> None:
        self.events: list[Event] = []
        self.times = _NO_TIMES[:]
        self._entries: list[LogEntry] | None = None  # made when first asked for: most logs never are
        for entry in entries:
            self.add_entry(entry)

    def __len__(self) -> int:
        return len(self.events)

    def add(self, event: Event, time: float) -> None:
        """Append an event that happened at ``time`` (seconds since the epoch)."""
        self.events.append(event)
        self.times.append(time)

    def add_entry(self, entry: LogEntry) -> None:
        """Append an entry read from elsewhere (a store, a file); it must carry the next seq."""
        if entry.seq != len(self.events) + 1:
            raise ValueError(f"log entry {len(self.events) + 1} has seq {entry.seq}; a log numbers from 1")
        self._made().append(entry)
        self.add(entry.event, entry.time)

    def entries(self, start: int = 0, stop: int | None = None) -> list[LogEntry]:
        """The entries from index ``start`` to ``stop`` (the end when ``None``), made the first time asked."""
        end = len(self.events) if stop is None else stop
        return self._made()[start:end]

    def _made(self) -> list[LogEntry]:
        """The entries made so far, every event's included."""
        if self._entries is None:
            self._entries = []
        made = self._entries
        for index in range(len(made), len(self.events)):
            made.append(LogEntry(seq=index + 1, time=self.times[index], event=self.events[index]))
        return made
