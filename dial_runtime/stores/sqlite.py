"""The SQLite store: one database file shared by every worker on the machine, locks held as OS file locks."""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from ..errors import ConversationBusy
from ..runtime.events import LogEntry
from .base import StoreConflict, check_entries, decode, encode

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dial_log (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID
"""
_LAST = "SELECT coalesce(max(seq), 0) FROM dial_log WHERE conversation_id = ?"
_INSERT = "INSERT INTO dial_log (conversation_id, seq, time, entry) VALUES (?, ?, ?, ?)"
_READ = "SELECT entry FROM dial_log WHERE conversation_id = ? AND seq > ? ORDER BY seq"
_CONVERSATIONS = "SELECT DISTINCT conversation_id FROM dial_log"


class SQLiteStore:
    """Logs in a SQLite file (``sqlite3`` from the standard library), for workers on one machine.

    The database runs in WAL mode, so readers never wait for the writer, with ``synchronous=NORMAL``: a commit
    reaches the write-ahead log without an fsync of its own (the log is synced at checkpoints). A process that
    dies loses nothing it committed; only a power loss or an OS crash can undo the last few commits, and the
    database stays consistent even then. That trade keeps an append far below a millisecond.

    Every append is one ``BEGIN IMMEDIATE`` transaction (check the last seq, insert), so appends from any number
    of connections and processes serialise and a stale ``expected_seq`` is refused. The table's primary key is
    ``(conversation_id, seq)``. One connection per store is shared by the worker threads the calls run in,
    behind a lock; ``sqlite3`` caches its prepared statements.

    :meth:`lock` takes an ``flock`` on ``<db>.locks/<sha1 of the id>.lock``: the kernel releases it when the
    holder exits or dies, so no lock outlives its process (a row in a table would). Lock files stay behind,
    empty, to be reused.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._connection: sqlite3.Connection | None = None
        self._closed = False
        self._guard = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            self._set_up(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    @staticmethod
    def _set_up(connection: sqlite3.Connection) -> None:
        """Switch the file to WAL (once: the mode is kept in the file) and create the table.

        Switching the journal mode needs the file to itself and answers "database is locked" at once, without
        SQLite's busy wait, while other connections are opening it too: so it is retried for a while.
        """
        deadline = time.monotonic() + 30.0
        while True:
            try:
                (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
                if str(mode).lower() != "wal":
                    connection.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute(_SCHEMA)

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._guard:
            if self._connection is None:
                if self._closed:
                    raise RuntimeError(f"the store at {str(self.path)!r} is closed")
                self._connection = self._connect()
            return work(self._connection)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._call, work)

    async def append(self, conversation_id: str, entries: Sequence[LogEntry], *, expected_seq: int) -> None:
        """Append ``entries`` in one transaction iff the log ends at ``expected_seq``; else StoreConflict."""
        check_entries(entries, expected_seq)
        rows = [(conversation_id, entry.seq, entry.time, encode(entry)) for entry in entries]

        def work(connection: sqlite3.Connection) -> None:
            connection.execute("BEGIN IMMEDIATE")
            try:
                (last,) = connection.execute(_LAST, (conversation_id,)).fetchone()
                if last != expected_seq:
                    raise StoreConflict(f"conversation {conversation_id!r} is at seq {last}, not {expected_seq}")
                connection.executemany(_INSERT, rows)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

        await self._run(work)

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order."""

        def work(connection: sqlite3.Connection) -> list[tuple[str]]:
            return connection.execute(_READ, (conversation_id, after_seq)).fetchall()

        return [decode(text) for (text,) in await self._run(work)]

    async def conversations(self) -> list[str]:
        """The ids of the conversations with entries, sorted."""

        def work(connection: sqlite3.Connection) -> list[tuple[str]]:
            return connection.execute(_CONVERSATIONS).fetchall()

        return sorted(conversation_id for (conversation_id,) in await self._run(work))

    @asynccontextmanager
    async def lock(self, conversation_id: str) -> AsyncIterator[None]:
        """Hold the conversation across processes; :class:`ConversationBusy` at once when it is held elsewhere.

        Creating and ``flock``-ing a local file with ``LOCK_NB`` never waits, so it runs on the event loop.
        """
        folder = self.path.with_name(self.path.name + ".locks")
        folder.mkdir(exist_ok=True)
        name = hashlib.sha1(conversation_id.encode(), usedforsecurity=False).hexdigest()
        descriptor = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise ConversationBusy(f"conversation {conversation_id!r} is held by another worker") from None
        except BaseException:
            os.close(descriptor)
            raise
        try:
            yield
        finally:
            os.close(descriptor)  # closing the only descriptor of the open file releases its flock

    async def aclose(self) -> None:
        """Close the connection (the last one to close checkpoints the write-ahead log into the database)."""

        def work() -> None:
            with self._guard:
                self._closed = True
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None

        await anyio.to_thread.run_sync(work)
