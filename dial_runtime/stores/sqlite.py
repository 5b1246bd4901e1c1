"""The SQLite store: one database file shared by every worker on the machine, locks held as OS file locks."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from ..errors import ConversationBusy, StoreClosed, StoreConflict, StoreError
from ..runtime.events import LogEntry
from .base import ChangeFeed, Changes, check_entries, decode, encode

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
_HAS_LOG = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dial_log'"
_MARK_SIZE = 21


def _mark(seq: int, *, committed: bool) -> bytes:
    """A lock file's mark: the seq an append ends at (20 digits), then ``c`` once committed, ``p`` before."""
    return b"%020d%s" % (seq, b"c" if committed else b"p")


@functools.lru_cache(maxsize=4096)
def _lock_name(conversation_id: str) -> str:
    return hashlib.sha1(conversation_id.encode(), usedforsecurity=False).hexdigest() + ".lock"


def _open_lock_file(path: str, flags: int) -> int:
    """Open (creating) a lock file, and its folder when it is missing; only writers call this, never a read."""
    try:
        return os.open(path, flags | os.O_CREAT, 0o644)
    except FileNotFoundError:
        try:
            os.mkdir(os.path.dirname(path))  # the database's own folder must exist: it is never made here
        except FileExistsError:
            pass
        except FileNotFoundError:
            database = os.path.dirname(path).removesuffix(".locks")
            raise StoreError(
                f"SQLite store {database!r}: the folder {os.path.dirname(database)!r} does not exist"
            ) from None
        return os.open(path, flags | os.O_CREAT, 0o644)


#: Seconds between two reads of a watched conversation's lock-file mark (how soon another process's append is
#: noticed).
WATCH_INTERVAL = 0.1

#: Appends made on the event loop between two checkpoints (the worker thread's next append checkpoints first).
CHECKPOINT_EVERY = 256

#: The most encoded text (in characters) an append may write on the event loop; a larger one goes to a worker
#: thread, since writing it takes time in proportion (a reply can be megabytes).
ON_LOOP_LIMIT = 64 * 1024


def _plain(error: sqlite3.Error) -> str:
    """What SQLite said, in the words a person looking at the file needs."""
    text = str(error)
    if text == "file is not a database":
        return "the file is not a SQLite database (or it is corrupt or encrypted)"
    if text in ("unable to open database file", "disk I/O error"):
        return f"cannot open the database file ({text})"
    return text


def _busy(error: sqlite3.Error) -> bool:
    """Whether SQLite refused for a lock another connection holds (``SQLITE_BUSY``)."""
    return str(error) == "database is locked"


def _write(
    lock_file: str,
    conversation_id: str,
    rows: list[tuple[str, int, float, str]],
    expected_seq: int,
    connection: sqlite3.Connection,
) -> None:
    """One append's transaction, between its "pending" and its "committed" mark; rolled back if it fails."""
    end = expected_seq + len(rows)
    descriptor = _open_lock_file(lock_file, os.O_WRONLY)
    try:
        os.pwrite(descriptor, _mark(end, committed=False), 0)
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
        os.pwrite(descriptor, _mark(end, committed=True), 0)
    finally:
        os.close(descriptor)


class SQLiteStore:
    """Logs in a SQLite file (``sqlite3`` from the standard library), for workers on one machine.

    The database runs in WAL mode, so readers never wait for the writer, with ``synchronous=NORMAL``: a commit
    reaches the write-ahead log without an fsync of its own (the log is synced at checkpoints). A process that
    dies loses nothing it committed; only a power loss or an OS crash can undo the last few commits, and the
    database stays consistent even then. That trade keeps an append far below a millisecond.

    Every append is one ``BEGIN IMMEDIATE`` transaction (check the last seq, insert), so appends from any number
    of connections and processes serialise and a stale ``expected_seq`` is refused. The table's primary key is
    ``(conversation_id, seq)``. ``sqlite3`` caches each connection's prepared statements.

    What may wait runs in anyio's worker threads: opening the database, reads, checkpoints (they sync the file to
    disk), and any append that would have to wait for another writer. An append that cannot wait runs on the event
    loop instead, on a connection of its own that never waits for a lock (busy timeout 0) and never checkpoints: it
    writes a few pages to the write-ahead log in the OS's cache, tens of microseconds, where a round trip through a
    worker thread costs several times that. If the write lock is taken (another connection or process is writing),
    or the worker's connection is busy, or the log is due a checkpoint (every :data:`CHECKPOINT_EVERY` appends made
    on the loop), or the entries are large (over :data:`ON_LOOP_LIMIT` characters of JSON), the append goes to a
    worker thread, which waits for the lock as long as it takes (30 s at most) and checkpoints first when one is
    due. The first append after a checkpoint starts the write-ahead log over, which syncs its header: running
    checkpoints in the worker keeps that there too, except when another process sharing the file checkpointed last.

    :meth:`lock` takes an ``flock`` on ``<db>.locks/<sha1 of the id>.lock``: the kernel releases it when the
    holder exits or dies, so no lock outlives its process (a row in a table would). Lock files stay behind, to be
    reused, and delete with their database.

    The lock file also marks where the conversation's log ends: every append writes "pending" with the seq it
    will end at before its transaction and "committed" after its commit. A :meth:`read` after the seq that a
    committed mark names returns ``[]`` from the mark, without waiting for a worker thread: a worker taking up a
    conversation it drove last (the common case) reads nothing from the database. The marks only ever speed a
    read up, never stand for the log: a read from the start (``after_seq=0``, what opening a conversation does)
    always asks the database, and so does any other mark, or none (a copy of the database made without its lock
    folder, a folder an operator cleared, an append that died between its commit and its mark). Appends are
    conflict-checked whatever the mark says, so a stale mark could only ever cost a spurious
    :class:`StoreConflict`.

    Whatever keeps the store from being used (a file that is not a SQLite database, a corrupt one, a folder that
    does not exist) is a :class:`StoreError` naming the path, raised by the first call, before anything is
    written. ``create=False`` opens the database read-only and creates nothing: no file, no table, no lock file.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path)
        self.create = create
        self._has_log = create
        self._locks = self.path.with_name(self.path.name + ".locks")
        self._connection: sqlite3.Connection | None = None
        self._on_loop: sqlite3.Connection | None = None
        self._appends_on_loop = 0
        self._closed = False
        self._guard = threading.Lock()
        self._changes = ChangeFeed()

    def _connect(self) -> sqlite3.Connection:
        """Open the worker threads' connection (returned) and the event loop's, which never waits for a lock and
        never checkpoints."""
        if not self.create:
            return self._connect_read_only()
        if not self.path.parent.is_dir():
            raise StoreError(
                f"SQLite store {str(self.path)!r}: the folder {str(self.path.parent)!r} does not exist"
            )
        connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        on_loop: sqlite3.Connection | None = None
        try:
            self._set_up(connection)
            on_loop = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0.0)
            on_loop.execute("PRAGMA synchronous=NORMAL")
            on_loop.execute("PRAGMA wal_autocheckpoint=0")
        except BaseException:
            for opened in (on_loop, connection):
                if opened is not None:
                    opened.close()
            raise
        self._on_loop = on_loop
        return connection

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that only reads (``query_only``), to a database file that must exist already.

        It is opened ``mode=rw`` (never creating the file; read-only when the file is write-protected), not
        ``mode=ro``: a connection that may write is the one that removes the ``-wal`` and ``-shm`` files of a WAL
        database when it closes last, so reading leaves the folder as it was."""
        if not self.path.is_file():
            raise StoreError(f"SQLite store {str(self.path)!r}: no such database file")
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=rw"
        connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            connection.execute("PRAGMA query_only=1")
            (tables,) = connection.execute(_HAS_LOG).fetchone()
        except BaseException:
            connection.close()
            raise
        self._has_log = tables > 0
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
            try:
                if self._connection is None:
                    if self._closed:
                        raise StoreClosed(f"the store at {str(self.path)!r} is closed")
                    self._connection = self._connect()
                return work(self._connection)
            except sqlite3.DatabaseError as error:
                if _busy(error):
                    raise
                raise StoreError(f"SQLite store {str(self.path)!r}: {_plain(error)}") from error

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._call, work)

    def _on_the_loop(self, write: Callable[[sqlite3.Connection], None]) -> bool:
        """Run ``write`` on the event loop's connection if it can run without waiting; whether it ran.

        It cannot when the connections are not open yet, a worker thread is using them, a checkpoint is due, or
        another connection holds the write lock (SQLite answers "database is locked" at once: nothing was written).
        """
        if self._on_loop is None or self._appends_on_loop >= CHECKPOINT_EVERY or not self._guard.acquire(False):
            return False
        try:
            if self._on_loop is None:
                return False
            write(self._on_loop)
        except sqlite3.DatabaseError as error:
            if _busy(error):
                return False
            raise StoreError(f"SQLite store {str(self.path)!r}: {_plain(error)}") from error
        finally:
            self._guard.release()
        self._appends_on_loop += 1
        return True

    async def append(self, conversation_id: str, entries: Sequence[LogEntry], *, expected_seq: int) -> None:
        """Append ``entries`` in one transaction iff the log ends at ``expected_seq``; else StoreConflict."""
        check_entries(entries, expected_seq)
        rows = [(conversation_id, entry.seq, entry.time, encode(entry)) for entry in entries]
        write = functools.partial(_write, self._lock_file(conversation_id), conversation_id, rows, expected_seq)
        if sum(len(row[3]) for row in rows) <= ON_LOOP_LIMIT and self._on_the_loop(write):
            if rows:
                self._changes.publish(conversation_id)
            return
        checkpoint = self._appends_on_loop >= CHECKPOINT_EVERY
        if checkpoint:
            self._appends_on_loop = 0

        def work(connection: sqlite3.Connection) -> None:
            if checkpoint:
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
            write(connection)

        await self._run(work)
        if rows:
            self._changes.publish(conversation_id)

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order (``[]`` at once when ``after_seq`` is past the start and the
        lock file's mark says the log ends there)."""
        if (
            after_seq > 0
            and not self._closed
            and self._marked(conversation_id) == _mark(after_seq, committed=True)
        ):
            return []

        def work(connection: sqlite3.Connection) -> list[tuple[str]]:
            if not self._has_log:
                return []
            return connection.execute(_READ, (conversation_id, after_seq)).fetchall()

        return [decode(text) for (text,) in await self._run(work)]

    async def conversations(self) -> list[str]:
        """The ids of the conversations with entries, sorted."""

        def work(connection: sqlite3.Connection) -> list[tuple[str]]:
            if not self._has_log:
                return []
            return connection.execute(_CONVERSATIONS).fetchall()

        return sorted(conversation_id for (conversation_id,) in await self._run(work))

    @contextlib.asynccontextmanager
    async def lock(self, conversation_id: str) -> AsyncIterator[None]:
        """Hold the conversation across processes; :class:`ConversationBusy` at once when it is held elsewhere.

        Creating and ``flock``-ing a local file with ``LOCK_NB`` never waits, so it runs on the event loop.
        """
        if self._closed:
            raise StoreClosed(f"the store at {str(self.path)!r} is closed")
        descriptor = _open_lock_file(self._lock_file(conversation_id), os.O_RDWR)
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

    def watch(self, conversation_id: str | None = None) -> AbstractAsyncContextManager[Changes]:
        """Watch the appends to one conversation (``None``: to any).

        Appends made through this store object wake the watcher at once. Appends by other processes sharing the
        file (other workers) are noticed for a watch of one conversation by reading its lock file's mark every
        :data:`WATCH_INTERVAL` seconds while the watch waits (a read of a few bytes of a local file, on the event
        loop): every append, from any process, rewrites that mark. A watch of every conversation hears this
        process only: SQLite has no notification across processes, and its ``data_version`` says that the file
        changed, not which conversation. An append whose process died between its commit and its mark is noticed
        with the next append.
        """
        if self._closed:
            raise StoreClosed(f"the store at {str(self.path)!r} is closed")
        if conversation_id is None:
            return self._changes.watch(None)
        return self._changes.watch(
            conversation_id, probe=lambda: self._committed(conversation_id), interval=WATCH_INTERVAL
        )

    def _committed(self, conversation_id: str) -> bytes | None:
        """The conversation's mark when it names a committed append (``None``: no mark, or one in progress or
        refused, which says nothing yet)."""
        mark = self._marked(conversation_id)
        return mark if mark is not None and mark.endswith(b"c") else None

    def _lock_file(self, conversation_id: str) -> str:
        """Where the conversation's lock file is (it may not exist yet)."""
        return os.path.join(self._locks, _lock_name(conversation_id))

    def _marked(self, conversation_id: str) -> bytes | None:
        """The mark in the conversation's lock file, ``None`` when there is no lock file yet.

        Reading a few bytes of a small local file never waits on another process, so it runs on the event loop.
        """
        try:
            descriptor = os.open(self._lock_file(conversation_id), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return os.pread(descriptor, _MARK_SIZE, 0)
        finally:
            os.close(descriptor)

    async def aclose(self) -> None:
        """Close the connection (the last one to close checkpoints the write-ahead log into the database)."""

        def work() -> None:
            with self._guard:
                self._closed = True
                for connection in (self._on_loop, self._connection):
                    if connection is not None:
                        connection.close()
                self._on_loop = self._connection = None

        self._changes.close()
        await anyio.to_thread.run_sync(work)
