"""The in-process store: logs in a dict, for a single process (the default, and for tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from ..errors import ConversationBusy, StoreClosed, StoreConflict
from ..runtime.events import LogEntry
from ..views.inbox import WaitingQuery, WaitingRow, matches, sort_key
from .base import ChangeFeed, Changes, check_entries, encode
from .chain import GENESIS, StoredRow, chain_hash, link_through


class MemoryStore:
    """Logs kept in this process; they end with it. Every method runs without awaiting, so each is atomic on
    the event loop. Closed, it refuses every call (:class:`~dial_runtime.errors.StoreClosed`), as the durable
    stores do, so code tested against it behaves the same on them.

    Each entry is kept with its hash (:mod:`~dial_runtime.stores.chain`), over the entry's text as a durable
    store writes it (:func:`~dial_runtime.stores.base.encode`), which is the text :meth:`rows` gives for it.
    ``chain=False`` keeps no hash (the entries it appends have none). It keeps the inbox's read model
    (:mod:`~dial_runtime.views.inbox`) in a dict, changed with the appends.
    """

    def __init__(self, *, chain: bool = True) -> None:
        self.chain = chain
        self._logs: dict[str, list[LogEntry]] = {}
        self._hashes: dict[str, list[str | None]] = {}
        self._held: set[str] = set()
        self._waiting: dict[str, list[WaitingRow]] = {}
        self._closed = False
        self._changes = ChangeFeed()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the in-process store is closed")

    async def append(
        self,
        conversation_id: str,
        entries: Sequence[LogEntry],
        *,
        expected_seq: int,
        waiting: Sequence[WaitingRow] | None = None,
    ) -> None:
        """Append ``entries`` iff the log ends at ``expected_seq``; else :class:`StoreConflict`. ``waiting``, when
        given, becomes the conversation's waiting rows."""
        self._check_open()
        check_entries(entries, expected_seq)
        log = self._logs.get(conversation_id, [])
        last = log[-1].seq if log else 0
        if last != expected_seq:
            raise StoreConflict(f"conversation {conversation_id!r} is at seq {last}, not {expected_seq}")
        if entries:
            hashes = self._hashes.setdefault(conversation_id, [])
            del hashes[len(log) :]  # one hash (or None) per entry kept, whatever was done to either list
            hashes.extend([None] * (len(log) - len(hashes)))
            if self.chain:
                link = self._link(conversation_id)
                for entry in entries:
                    link = chain_hash(link, encode(entry))
                    hashes.append(link)
            else:
                hashes.extend([None] * len(entries))
            self._logs.setdefault(conversation_id, []).extend(entries)
            if waiting is not None:
                self._keep(conversation_id, waiting)
            self._changes.publish(conversation_id)

    def _keep(self, conversation_id: str, rows: Sequence[WaitingRow]) -> None:
        if rows:
            self._waiting[conversation_id] = list(rows)
        else:
            self._waiting.pop(conversation_id, None)

    async def waiting(self, query: WaitingQuery) -> list[tuple[str, str]]:
        """The waiting rows ``query`` finds (see :class:`~dial_runtime.views.inbox.WaitingQuery`)."""
        self._check_open()
        found = sorted(
            (
                (conversation_id, row)
                for conversation_id, rows in self._waiting.items()
                for row in rows
                if matches(query, conversation_id, row)
            ),
            key=lambda pair: sort_key(*pair),
        )
        return [(conversation_id, row[6]) for conversation_id, row in found[: query.limit]]

    async def keep_waiting(self, conversation_id: str, rows: Sequence[WaitingRow], *, at_seq: int) -> bool:
        """Make ``rows`` the conversation's waiting rows iff its log ends at ``at_seq``."""
        self._check_open()
        log = self._logs.get(conversation_id, [])
        if (log[-1].seq if log else 0) != at_seq:
            return False
        self._keep(conversation_id, rows)
        return True

    async def waiting_conversations(self) -> list[str]:
        """The ids of the conversations with waiting rows, sorted."""
        self._check_open()
        return sorted(self._waiting)

    def _link(self, conversation_id: str) -> str:
        """The chain's link at the log's last entry: its hash, or (an entry kept without one) the link through
        it from the last entry that has one."""
        log, hashes = self._logs.get(conversation_id, []), self._hashes.get(conversation_id, [])
        link, start = GENESIS, 0
        for index in range(min(len(log), len(hashes)) - 1, -1, -1):
            found = hashes[index]
            if found is not None:
                link, start = found, index + 1
                break
        return link_through(link, (encode(entry) for entry in log[start:]))

    async def rows(self, conversation_id: str) -> list[StoredRow]:
        """The conversation's entries as kept (each as the text a chaining store keeps), with their hashes."""
        self._check_open()
        log, hashes = self._logs.get(conversation_id, []), self._hashes.get(conversation_id, [])
        return [
            StoredRow(entry.seq, encode(entry), hashes[index] if index < len(hashes) else None)
            for index, entry in enumerate(log)
        ]

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order (a log's seq ``n`` is at index ``n - 1``)."""
        self._check_open()
        return self._logs.get(conversation_id, [])[max(after_seq, 0) :]

    async def conversations(self) -> list[str]:
        """The ids of the conversations with entries, sorted."""
        self._check_open()
        return sorted(self._logs)

    @asynccontextmanager
    async def lock(self, conversation_id: str) -> AsyncIterator[None]:
        """Hold the conversation in this process; :class:`ConversationBusy` when it is held already."""
        self._check_open()
        if conversation_id in self._held:
            raise ConversationBusy(f"conversation {conversation_id!r} is held by another task")
        self._held.add(conversation_id)
        try:
            yield
        finally:
            self._held.discard(conversation_id)

    def watch(self, conversation_id: str | None = None) -> AbstractAsyncContextManager[Changes]:
        """Watch the appends to one conversation (``None``: to any) made through this store object."""
        self._check_open()
        return self._changes.watch(conversation_id)

    async def aclose(self) -> None:
        """Refuse every later call, and end every watch; the logs go with the store."""
        self._closed = True
        self._changes.close()
