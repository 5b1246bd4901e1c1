"""The PostgreSQL store: logs in one table any number of workers on any number of machines share."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread

try:
    import psycopg
except ImportError as error:
    raise ImportError("the PostgreSQL store needs psycopg 3: pip install 'dial-runtime[postgres]'") from error

from ..errors import ConversationBusy, StoreClosed, StoreConflict
from ..runtime.events import LogEntry
from .base import check_entries, decode, encode

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dial_log (
    conversation_id text NOT NULL,
    seq bigint NOT NULL,
    time double precision NOT NULL,
    entry text NOT NULL,
    PRIMARY KEY (conversation_id, seq)
)
"""
# The two-int4 advisory key space never meets the single-bigint one conversation locks use.
_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('dial_runtime'), hashtext('dial_log'))"
_LAST = "SELECT coalesce(max(seq), 0) FROM dial_log WHERE conversation_id = %s"
_APPEND = """
INSERT INTO dial_log (conversation_id, seq, time, entry)
SELECT %(id)s::text, u.seq, u.time, u.entry
FROM unnest(%(seqs)s::bigint[], %(times)s::double precision[], %(entries)s::text[]) AS u (seq, time, entry)
WHERE (SELECT coalesce(max(seq), 0) FROM dial_log WHERE conversation_id = %(id)s::text) = %(expected)s
"""
_READ = "SELECT entry FROM dial_log WHERE conversation_id = %s AND seq > %s ORDER BY seq"
_CONVERSATIONS = "SELECT DISTINCT conversation_id FROM dial_log"
_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"


def _scalar(cursor: psycopg.Cursor[Any]) -> Any:
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("a query that returns one row returned none")
    return row[0]


class PostgresStore:
    """Logs in the table ``dial_log`` (created when missing, in the first schema of the ``search_path``), reached
    with psycopg 3 from worker threads.

    An append is one statement, so one transaction and one round trip: it inserts the entries only when the
    conversation's last seq is ``expected_seq``. Two appends racing past that check both insert ``expected_seq +
    1``; the primary key ``(conversation_id, seq)`` makes the second wait for the first and fail, and that unique
    violation is a :class:`StoreConflict` too. Appends and reads share one connection (autocommit, statements
    prepared on the server), behind a lock; a connection that broke is replaced on the next call.

    :meth:`lock` takes ``pg_try_advisory_lock(hashtextextended(id, 0))`` on a session connection of its own, kept
    for as long as the lock is held: the server releases the lock on exit and when that session ends, the holder's
    death included. Released lock connections are kept for the next lock. Two ids whose 64-bit hashes collide
    exclude each other.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._connection: psycopg.Connection[Any] | None = None
        self._idle: list[psycopg.Connection[Any]] = []
        self._closed = False
        self._guard = threading.Lock()
        self._idle_guard = threading.Lock()

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True)

    def _open(self) -> psycopg.Connection[Any]:
        connection = self._connect()
        try:
            with connection.transaction():
                if _scalar(connection.execute("SELECT to_regclass('dial_log') IS NULL")):
                    connection.execute(_SCHEMA_LOCK)
                    connection.execute(_SCHEMA)
        except BaseException:
            connection.close()
            raise
        return connection

    def _call(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._guard:
            if self._closed:
                raise StoreClosed("the PostgreSQL store is closed")
            if self._connection is None or self._connection.closed:
                self._connection = self._open()
            return work(self._connection)

    async def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        return await anyio.to_thread.run_sync(self._call, work)

    async def append(self, conversation_id: str, entries: Sequence[LogEntry], *, expected_seq: int) -> None:
        """Append ``entries`` in one transaction iff the log ends at ``expected_seq``; else StoreConflict."""
        check_entries(entries, expected_seq)
        params = {
            "id": conversation_id,
            "seqs": [entry.seq for entry in entries],
            "times": [entry.time for entry in entries],
            "entries": [encode(entry) for entry in entries],
            "expected": expected_seq,
        }

        def work(connection: psycopg.Connection[Any]) -> bool:
            if not entries:
                last: int = _scalar(connection.execute(_LAST, (conversation_id,), prepare=True))
                return last == expected_seq
            try:
                return connection.execute(_APPEND, params, prepare=True).rowcount == len(entries)
            except psycopg.errors.UniqueViolation:
                return False

        if not await self._run(work):
            raise StoreConflict(f"conversation {conversation_id!r} is not at seq {expected_seq}")

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order."""

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(_READ, (conversation_id, after_seq), prepare=True).fetchall()

        return [decode(text) for (text,) in await self._run(work)]

    async def conversations(self) -> list[str]:
        """The ids of the conversations with entries, sorted by code point (not by the database's collation)."""

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(_CONVERSATIONS).fetchall()

        return sorted(conversation_id for (conversation_id,) in await self._run(work))

    def _acquire(self, conversation_id: str) -> psycopg.Connection[Any]:
        while True:
            with self._idle_guard:
                if self._closed:
                    raise StoreClosed("the PostgreSQL store is closed")
                connection = self._idle.pop() if self._idle else None
            kept = connection is not None
            if connection is None:
                connection = self._connect()
            try:
                held = _scalar(connection.execute(_TRY_LOCK, (conversation_id,), prepare=True))
            except psycopg.OperationalError:
                connection.close()
                if kept:
                    continue  # a kept session died while idle: try the next one, or a new one
                raise
            if held:
                return connection
            self._keep(connection)
            raise ConversationBusy(f"conversation {conversation_id!r} is held by another worker")

    def _release(self, connection: psycopg.Connection[Any], conversation_id: str) -> None:
        try:
            connection.execute(_UNLOCK, (conversation_id,), prepare=True)
        except psycopg.Error:
            connection.close()  # the session is gone, and its lock with it
        else:
            self._keep(connection)

    def _keep(self, connection: psycopg.Connection[Any]) -> None:
        with self._idle_guard:
            if not self._closed:
                self._idle.append(connection)
                return
        connection.close()

    @asynccontextmanager
    async def lock(self, conversation_id: str) -> AsyncIterator[None]:
        """Hold the conversation across connections; :class:`ConversationBusy` at once when it is held elsewhere.

        Taking and releasing are shielded from cancellation: a worker thread cannot be abandoned anyway, and a
        cancelled caller must neither lose a lock it was granted nor leave one behind.
        """
        with anyio.CancelScope(shield=True):
            connection = await anyio.to_thread.run_sync(self._acquire, conversation_id)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._release, connection, conversation_id)

    async def aclose(self) -> None:
        """Close the connections; locks still held close theirs when released."""

        def work() -> None:
            with self._guard, self._idle_guard:
                self._closed = True
                idle, self._idle = self._idle, []
                connection, self._connection = self._connection, None
            for each in [*idle, *([connection] if connection is not None else [])]:
                each.close()

        await anyio.to_thread.run_sync(work)
