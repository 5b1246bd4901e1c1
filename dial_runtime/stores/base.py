"""What the durable event-log stores share (the protocol a store satisfies is
:class:`dial_runtime.ports.StorePort`, re-exported here).

A conversation's state is a fold over its log, so persisting the log is persisting the conversation. A store keeps
the logs of many conversations, keyed by conversation id; appends are optimistic (each names the sequence number it
expects to follow) and the per-conversation lock keeps two workers from driving one conversation at once.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Sequence

import anyio
import anyio.from_thread
import anyio.lowlevel
import msgspec

from ..errors import LogError, StoreClosed, StoreConflict, StoreError
from ..ports import StorePort
from ..runtime.events import LogEntry, entry_from_dict

__all__ = [
    "ENTRY_TEXT",
    "ChangeFeed",
    "Changes",
    "StoreClosed",
    "StoreConflict",
    "StoreError",
    "StorePort",
    "check_entries",
    "decode",
    "encode",
    "redact_url",
]


class Changes:
    """What :meth:`StorePort.watch` yields: an async iterator of the ids of conversations appended to since the
    watch began (``None``: any conversation may have changed, re-read them all). Appends made while the consumer
    is busy come once per conversation, in the order they first came."""

    def __init__(self, wanted: str | None, probe: Callable[[], object] | None, interval: float) -> None:
        self.wanted = wanted
        self.token = anyio.lowlevel.current_token()
        self._pending: dict[str | None, None] = {}
        self._woken = anyio.Event()
        self._closed = False
        self._probe = probe
        self._interval = interval
        self._probed = probe() if probe is not None else None

    def wake(self, conversation_id: str | None) -> None:
        """Note a change (on this watcher's event loop)."""
        if conversation_id is None or self.wanted is None or conversation_id == self.wanted:
            self._pending[conversation_id if self.wanted is None else self.wanted] = None
            self._woken.set()

    def close(self) -> None:
        self._closed = True
        self._woken.set()

    def __aiter__(self) -> Changes:
        return self

    async def __anext__(self) -> str | None:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            if self._probe is None:
                await self._woken.wait()
            else:
                with anyio.move_on_after(self._interval):
                    await self._woken.wait()
                probed = self._probe()
                if probed is not None and probed != self._probed:
                    self._probed = probed
                    self.wake(self.wanted)
            if not self._pending and not self._closed:
                self._woken = anyio.Event()
        for first in self._pending:
            del self._pending[first]
            return first
        raise StopAsyncIteration  # closed while woken: nothing pending


class ChangeFeed:
    """The watchers of one store in this process, woken by :meth:`publish` from the event loop or any thread.

    A store publishes after each append it makes (the in-process and SQLite stores) or for each notification its
    listener receives (PostgreSQL). A watcher lives on the event loop that opened it; a publication from another
    thread is handed to that loop (and dropped if the loop has ended).
    """

    def __init__(self) -> None:
        self._watchers: set[Changes] = set()
        self._guard = threading.Lock()
        self._closed = False

    @property
    def watched(self) -> bool:
        """Whether anyone watches."""
        return bool(self._watchers)

    def publish(self, conversation_id: str | None) -> None:
        """Wake the watchers of ``conversation_id`` and of any conversation (``None``: every watcher)."""
        with self._guard:
            watchers = list(self._watchers)
        if not watchers:
            return
        try:
            here: anyio.lowlevel.EventLoopToken | None = anyio.lowlevel.current_token()
        except RuntimeError:
            here = None
        elsewhere: dict[anyio.lowlevel.EventLoopToken, list[Changes]] = {}
        for watcher in watchers:
            if watcher.token == here:
                watcher.wake(conversation_id)
            else:
                elsewhere.setdefault(watcher.token, []).append(watcher)
        for token, group in elsewhere.items():
            with contextlib.suppress(RuntimeError):  # that event loop has ended: its watchers went with it
                anyio.from_thread.run_sync(_wake_all, group, conversation_id, token=token)

    @contextlib.asynccontextmanager
    async def watch(
        self, conversation_id: str | None, *, probe: Callable[[], object] | None = None, interval: float = 0.25
    ) -> AsyncIterator[Changes]:
        """A watcher of one conversation (``None``: of all), for the block's length. ``probe``, when given, is
        called every ``interval`` seconds while the watcher waits; a result that differs from the last is a
        change too (how a store notices writers it cannot hear); ``None`` says nothing."""
        if self._closed:
            raise StoreClosed("the store is closed")
        changes = Changes(conversation_id, probe, interval)
        with self._guard:
            self._watchers.add(changes)
        try:
            yield changes
        finally:
            with self._guard:
                self._watchers.discard(changes)

    def close(self) -> None:
        """End every watcher's iteration (the store closed); later watches raise :class:`StoreClosed`."""
        self._closed = True
        with self._guard:
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.close()


def _wake_all(watchers: list[Changes], conversation_id: str | None) -> None:
    for watcher in watchers:
        watcher.wake(conversation_id)


def check_entries(entries: Sequence[LogEntry], expected_seq: int) -> None:
    """Refuse entries that do not number on from ``expected_seq``: a log has no gaps and no repeats."""
    for offset, entry in enumerate(entries, start=1):
        if entry.seq != expected_seq + offset:
            raise ValueError(f"entry {offset} has seq {entry.seq}, expected {expected_seq + offset}")


#: How a stored entry is written (:func:`encode`), and how the chain writes an entry's dict again: compact, in the
#: dict's order of keys, ASCII escapes, ``NaN``/``Infinity`` kept.
ENTRY_TEXT = json.JSONEncoder(separators=(",", ":"))


def encode(entry: LogEntry) -> str:
    """An entry as compact JSON text (a text column, not a JSON type: Python's JSON, ``NaN`` included, round-trips
    exactly, and the escapes keep NUL, which PostgreSQL's text cannot hold, and lone surrogates storable).

    The entry's builtin form goes to the encoder as it is: its tuples are written as arrays, so the copy with
    lists that :func:`entry_to_dict` makes is not needed on this path, which every write takes."""
    return ENTRY_TEXT.encode(msgspec.to_builtins(entry))


def decode(text: str) -> LogEntry:
    """The entry :func:`encode` wrote; :class:`~dial_runtime.LogError` for a stored row that is not one (not
    JSON, not an object with a seq, a time and an event, or an event the runtime does not write), naming the
    entry's seq and type as far as the row gives them."""
    try:
        return entry_from_dict(json.loads(text))
    except LogError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise _undecodable(text, error) from None


def _undecodable(text: str, error: Exception) -> LogError:
    try:
        data = json.loads(text)
    except ValueError:
        return LogError(None, None, f"a stored row is not JSON ({error})")
    seq = data.get("seq") if isinstance(data, dict) else None
    return LogError(
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        None,
        f"a stored row is not a log entry ({type(error).__name__}: {error})",
    )


def redact_url(url: str) -> str:
    """``url`` fit to show: a password in its user part (``user:PASSWORD@``) or its query (``password=``)
    becomes ``***``; everything else is kept as written."""
    url = _USER_PASSWORD.sub(r"\1:***@", url, count=1)
    return _QUERY_PASSWORD.sub(r"\1password=***", url)


_USER_PASSWORD = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#@:]*):[^/?#]*@")
_QUERY_PASSWORD = re.compile(r"([?&])password=[^&#]*")
