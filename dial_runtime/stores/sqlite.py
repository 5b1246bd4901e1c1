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
from typing import Literal, TypeVar

import anyio
import anyio.to_thread

from ..errors import ConversationBusy, StoreClosed, StoreConflict, StoreError
from ..runtime.events import LogEntry
from ..views.inbox import WaitingQuery, WaitingRow
from .base import ChangeFeed, Changes, check_entries, decode, encode
from .chain import GENESIS, StoredRow, chain_hash, link_through
from .shared import SQLiteDetaches, SQLiteUsedTokens
from .waiting import query_sql

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dial_log (
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL NOT NULL,
    entry TEXT NOT NULL,
    hash TEXT,
    PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID
"""
_WAITING_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS dial_waiting (
    conversation_id TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    action TEXT NOT NULL,
    since REAL NOT NULL,
    deadline REAL,
    roles TEXT NOT NULL,
    approvers TEXT NOT NULL,
    card TEXT NOT NULL,
    PRIMARY KEY (conversation_id, subject_id)
) WITHOUT ROWID
""",
)
_CLEAR_WAITING = "DELETE FROM dial_waiting WHERE conversation_id = ?"
_PUT_WAITING = (
    "INSERT INTO dial_waiting (conversation_id, subject_id, action, since, deadline, roles, approvers, card)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_HAS_WAITING = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dial_waiting'"
_WAITING_CONVERSATIONS = "SELECT DISTINCT conversation_id FROM dial_waiting"
# A table made before the chain existed gets the column (its rows keep no hash).
_CHAIN_SCHEMA = "ALTER TABLE dial_log ADD COLUMN hash TEXT"
_HAS_CHAIN = "SELECT count(*) FROM pragma_table_info('dial_log') WHERE name = 'hash'"
_LAST = "SELECT coalesce(max(seq), 0) FROM dial_log WHERE conversation_id = ?"
_INSERT = "INSERT INTO dial_log (conversation_id, seq, time, entry) VALUES (?, ?, ?, ?)"
_INSERT_CHAINED = "INSERT INTO dial_log (conversation_id, seq, time, entry, hash) VALUES (?, ?, ?, ?, ?)"
_TAIL = "SELECT seq, hash FROM dial_log WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1"
_LAST_HASHED = """
SELECT seq, hash FROM dial_log WHERE conversation_id = ? AND seq <= ? AND hash IS NOT NULL
ORDER BY seq DESC LIMIT 1
"""
_TEXTS = "SELECT entry FROM dial_log WHERE conversation_id = ? AND seq > ? AND seq <= ? ORDER BY seq"
_READ = "SELECT entry FROM dial_log WHERE conversation_id = ? AND seq > ? ORDER BY seq"
_ROWS = "SELECT seq, entry, hash FROM dial_log WHERE conversation_id = ? ORDER BY seq"
_ROWS_UNCHAINED = "SELECT seq, entry, NULL FROM dial_log WHERE conversation_id = ? ORDER BY seq"
_CONVERSATIONS = "SELECT DISTINCT conversation_id FROM dial_log"
_HAS_LOG = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dial_log'"

Durability = Literal["normal", "full"]

#: ``PRAGMA synchronous`` for each durability.
_SYNCHRONOUS: dict[str, str] = {"normal": "NORMAL", "full": "FULL"}

#: The longest a call waits for another connection's write lock (in a worker thread) before it fails.
BUSY_TIMEOUT = 30.0

#: Seconds between two looks of a watch of one conversation at the database (how soon another process's append
#: is noticed).
WATCH_INTERVAL = 0.1


@functools.lru_cache(maxsize=4096)
def _lock_name(conversation_id: str) -> str:
    return hashlib.sha1(conversation_id.encode(), usedforsecurity=False).hexdigest() + ".lock"


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


class _Busy(Exception):
    """The event loop's attempt could not run without waiting; nothing was done, a worker thread will wait."""


def _append(
    conversation_id: str,
    rows: list[tuple[str, int, float, str]],
    expected_seq: int,
    chained: bool,
    waiting: Sequence[WaitingRow] | None,
    connection: sqlite3.Connection,
) -> None:
    """One append's transaction: check where the log ends, insert (``chained``: with each entry's hash over its
    stored text, chained onto the stored hash of the log's last entry), and make ``waiting`` the conversation's
    waiting rows when given; rolled back on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        if not chained:
            (last,) = connection.execute(_LAST, (conversation_id,)).fetchone()
            if last != expected_seq:
                raise StoreConflict(f"conversation {conversation_id!r} is at seq {last}, not {expected_seq}")
            connection.executemany(_INSERT, rows)
        else:
            tail = connection.execute(_TAIL, (conversation_id,)).fetchone()
            last, link = tail if tail is not None else (0, GENESIS)
            if last != expected_seq:
                raise StoreConflict(f"conversation {conversation_id!r} is at seq {last}, not {expected_seq}")
            if link is None:
                link = _link(connection, conversation_id, expected_seq)
            hashed = []
            for row in rows:
                link = chain_hash(link, row[3])
                hashed.append((*row, link))
            connection.executemany(_INSERT_CHAINED, hashed)
        if waiting is not None:
            _put_waiting(connection, conversation_id, waiting)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _put_waiting(connection: sqlite3.Connection, conversation_id: str, waiting: Sequence[WaitingRow]) -> None:
    connection.execute(_CLEAR_WAITING, (conversation_id,))
    if waiting:
        connection.executemany(_PUT_WAITING, [(conversation_id, *row) for row in waiting])


def _keep_waiting(
    conversation_id: str, waiting: Sequence[WaitingRow], at_seq: int, connection: sqlite3.Connection
) -> bool:
    """Make ``waiting`` the conversation's rows iff its log ends at ``at_seq``, in one transaction."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        (last,) = connection.execute(_LAST, (conversation_id,)).fetchone()
        if last == at_seq:
            _put_waiting(connection, conversation_id, waiting)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return bool(last == at_seq)


def _link(connection: sqlite3.Connection, conversation_id: str, seq: int) -> str:
    """The chain's link at entry ``seq``, which has no hash: through the entries after the last one that has."""
    found = connection.execute(_LAST_HASHED, (conversation_id, seq)).fetchone()
    start, link = found if found is not None else (0, GENESIS)
    texts = connection.execute(_TEXTS, (conversation_id, start, seq)).fetchall()
    return link_through(link, (text for (text,) in texts))


class SQLiteStore:
    """Logs in a SQLite file (``sqlite3`` from the standard library), for workers on one machine.

    The database is the only record: every call asks it, and nothing about a log is kept anywhere else. The file
    runs in WAL mode, so readers never wait for the writer. Each append is one ``BEGIN IMMEDIATE`` transaction
    that reads where the log ends, refuses a stale ``expected_seq`` (:class:`StoreConflict`) and inserts, rolled
    back on any error: appends from any number of connections and processes serialise on SQLite's write lock.

    Durability: ``durability="normal"`` (the default; ``sqlite:PATH?synchronous=normal``) runs
    ``synchronous=NORMAL``: a commit reaches the write-ahead log without an fsync, which happens at checkpoints.
    A process that crashes loses nothing it committed; a power loss or an OS crash can undo the last commits (the
    database stays consistent). ``durability="full"`` (``?synchronous=full``) syncs the log at every commit, so a
    commit survives those too, at the price of one fsync per append.

    Where calls run, by measurement (2 shared cores, Python 3.11, SQLite 3.40, ext4): an append of two entries
    takes about 150 µs, a read of a short log about as long, ``PRAGMA data_version`` 7 µs, and a round trip
    through an anyio worker thread 170-220 µs before any work. So with ``normal`` durability every call (append,
    read, list) first runs on the event loop, on the store's one connection with a busy timeout of 0: there it
    never waits. If SQLite answers ``SQLITE_BUSY`` (another connection holds the write lock; nothing was done),
    or a worker thread is using the connection, or the connection is not open yet (opening may wait), the call
    runs again in a worker thread, which waits for the lock for up to :data:`BUSY_TIMEOUT` seconds; meanwhile
    this store's other calls queue behind it. In ``bench_store.py``'s scenario (d) (open, a deferred suggestion,
    ``decide``) that costs 2.0 ms per turn where every call in a worker thread costs 5.1 ms (the in-process
    store: 0.75 ms). With ``full`` durability an append waits for an fsync (about 6 ms per append on the same
    disk), so appends always run in a worker thread, where the wait does not hold up the loop. SQLite's own
    checkpoints (every 1000 pages of log) run in the append that crosses the mark and sync the file: one fsync
    per ~4 MB written.

    Cancellation: an append that has begun is never cut short. On the loop it runs without awaiting; in a
    worker thread it runs in a shielded scope. It returns or raises what SQLite did, and a cancellation takes
    effect at the caller's next checkpoint: it cannot leave the caller unsure whether the entries were written.

    :meth:`lock` takes an ``flock`` on ``<db>.locks/<sha1 of the id>.lock``: the kernel releases it when the
    holder exits or dies, so no lock outlives its process. Lock files only lock; they stay behind, to be reused,
    and delete with their database (deleting them between calls loses nothing).

    Whatever keeps the store from being used (a file that is not a SQLite database, a corrupt one, a folder that
    does not exist) is a :class:`StoreError` naming the path, raised by the first call, before anything is
    written. ``create=False`` opens the database read-only and creates nothing: no file, no table, no lock file.

    The hash chain (:mod:`~dial_runtime.stores.chain`): each append writes its entries' hashes in the column
    ``hash``, in its transaction, chained onto the hash of entry ``expected_seq`` as the file holds it. A
    database from before the chain gets the column when it is opened (not with ``create=False``); its entries
    keep no hash, and the first append chains onto them. ``chain=False`` writes no hashes (to measure what they
    cost; a chained log appended to so is reported as missing hashes).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        durability: Durability = "normal",
        chain: bool = True,
    ) -> None:
        if durability not in _SYNCHRONOUS:
            raise ValueError(f"SQLite store {str(path)!r}: durability {durability!r} is not 'normal' or 'full'")
        self.path = Path(path)
        self.create = create
        self.durability = durability
        self.chain = chain
        self._has_log = create
        self._has_chain = create
        self._has_waiting = create
        self._locks = self.path.with_name(self.path.name + ".locks")
        self._connection: sqlite3.Connection | None = None
        self._closed = False
        self._guard = threading.Lock()
        self._changes = ChangeFeed()

    def _connect(self) -> sqlite3.Connection:
        """Open the store's connection (in a worker thread: opening may wait for other connections)."""
        if not self.create:
            return self._connect_read_only()
        if not self.path.parent.is_dir():
            raise StoreError(
                f"SQLite store {str(self.path)!r}: the folder {str(self.path.parent)!r} does not exist"
            )
        connection = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT
        )
        try:
            self._set_up(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection that only reads (``query_only``), to a database file that must exist already.

        It is opened ``mode=rw`` (never creating the file; read-only when the file is write-protected), not
        ``mode=ro``: a connection that may write is the one that removes the ``-wal`` and ``-shm`` files of a WAL
        database when it closes last, so reading leaves the folder as it was."""
        if not self.path.is_file():
            raise StoreError(f"SQLite store {str(self.path)!r}: no such database file")
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=rw"
        connection = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT
        )
        try:
            connection.execute("PRAGMA query_only=1")
            (tables,) = connection.execute(_HAS_LOG).fetchone()
            (chains,) = connection.execute(_HAS_CHAIN).fetchone()
            (waiting,) = connection.execute(_HAS_WAITING).fetchone()
        except BaseException:
            connection.close()
            raise
        self._has_log = tables > 0
        self._has_chain = chains > 0
        self._has_waiting = waiting > 0
        return connection

    def _set_up(self, connection: sqlite3.Connection) -> None:
        """Switch the file to WAL (once: the mode is kept in the file), set the durability, create the table.

        Switching the journal mode needs the file to itself and answers "database is locked" at once, without
        SQLite's busy wait, while other connections are opening it too: so it is retried for a while.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
                if str(mode).lower() != "wal":
                    connection.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as error:
                if not _busy(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        connection.execute(f"PRAGMA synchronous={_SYNCHRONOUS[self.durability]}")
        connection.execute(_SCHEMA)
        for schema in _WAITING_SCHEMA:
            connection.execute(schema)
        (chained,) = connection.execute(_HAS_CHAIN).fetchone()
        if not chained:
            try:
                connection.execute(_CHAIN_SCHEMA)
            except sqlite3.OperationalError as error:
                if "duplicate column" not in str(error):  # another connection added it first
                    raise

    def _use(self, work: Callable[[sqlite3.Connection], T], wait: bool) -> T:
        """Run ``work`` on the connection, under the guard that keeps it to one thread at a time.

        ``wait=False`` (on the event loop): raise :class:`_Busy` rather than wait, for the guard, for opening the
        connection or for another connection's lock (busy timeout 0). ``wait=True`` (in a worker thread): open
        the connection if need be, and wait for a lock for up to :data:`BUSY_TIMEOUT` seconds.
        """
        if self._closed:
            raise StoreClosed(f"the store at {str(self.path)!r} is closed")
        if not self._guard.acquire(blocking=wait):
            raise _Busy
        try:
            connection = self._connection
            if connection is None:
                if self._closed:
                    raise StoreClosed(f"the store at {str(self.path)!r} is closed")
                if not wait:
                    raise _Busy
                connection = self._connection = self._connect()
            if not wait:
                return work(connection)
            connection.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
            try:
                return work(connection)
            finally:
                connection.execute("PRAGMA busy_timeout=0")
        except sqlite3.DatabaseError as error:
            if not _busy(error):
                raise StoreError(f"SQLite store {str(self.path)!r}: {_plain(error)}") from error
            if not wait:
                raise _Busy from None
            raise StoreError(
                f"SQLite store {str(self.path)!r}: another connection held the database for {BUSY_TIMEOUT:g} s"
            ) from error
        finally:
            self._guard.release()

    async def _run(
        self, work: Callable[[sqlite3.Connection], T], *, on_loop: bool = True, shield: bool = False
    ) -> T:
        """``work``'s result: on the event loop when it can run there without waiting, else in a worker thread
        (``shield``: one that a cancellation of the caller does not interrupt)."""
        if on_loop:
            try:
                return self._use(work, False)
            except _Busy:
                pass
        with anyio.CancelScope(shield=shield):
            result = await anyio.to_thread.run_sync(self._use, work, True)
        return result

    async def append(
        self,
        conversation_id: str,
        entries: Sequence[LogEntry],
        *,
        expected_seq: int,
        waiting: Sequence[WaitingRow] | None = None,
    ) -> None:
        """Append ``entries`` in one transaction iff the log ends at ``expected_seq``; else StoreConflict.
        ``waiting``, when given, becomes the conversation's waiting rows in that transaction."""
        check_entries(entries, expected_seq)
        rows = [(conversation_id, entry.seq, entry.time, encode(entry)) for entry in entries]
        work = functools.partial(_append, conversation_id, rows, expected_seq, self.chain, waiting)
        await self._run(work, on_loop=self.durability == "normal", shield=True)
        if rows:
            self._changes.publish(conversation_id)

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order."""

        def work(connection: sqlite3.Connection) -> list[tuple[str]]:
            if not self._has_log:
                return []
            return connection.execute(_READ, (conversation_id, after_seq)).fetchall()

        return [decode(text) for (text,) in await self._run(work)]

    async def waiting(self, query: WaitingQuery) -> list[tuple[str, str]]:
        """The waiting rows ``query`` finds (see :class:`~dial_runtime.views.inbox.WaitingQuery`)."""
        sql, params = query_sql(query, "?", "instr")

        def work(connection: sqlite3.Connection) -> list[tuple[str, str]]:
            if not self._has_waiting:
                return []
            return connection.execute(sql, params).fetchall()

        return await self._run(work)

    async def keep_waiting(self, conversation_id: str, rows: Sequence[WaitingRow], *, at_seq: int) -> bool:
        """Make ``rows`` the conversation's waiting rows iff its log ends at ``at_seq``."""
        work = functools.partial(_keep_waiting, conversation_id, rows, at_seq)
        return await self._run(work, shield=True)

    async def waiting_conversations(self) -> list[str]:
        """The ids of the conversations with waiting rows, sorted."""

        def work(connection: sqlite3.Connection) -> list[tuple[str]]:
            if not self._has_waiting:
                return []
            return connection.execute(_WAITING_CONVERSATIONS).fetchall()

        return sorted(conversation_id for (conversation_id,) in await self._run(work))

    def used_tokens(self) -> SQLiteUsedTokens:
        """A keeper of used decision-link tokens in this store's database file (see
        :mod:`~dial_runtime.stores.shared`): what every worker serving the store shares."""
        return SQLiteUsedTokens(self.path, busy_timeout=BUSY_TIMEOUT)

    def detaches(self) -> SQLiteDetaches:
        """A keeper of the runs asked to go on without their client, in this store's database file (see
        :mod:`~dial_runtime.stores.shared`): how a detach that reaches another worker reaches the run's."""
        return SQLiteDetaches(self.path, busy_timeout=BUSY_TIMEOUT)

    async def rows(self, conversation_id: str) -> list[StoredRow]:
        """The conversation's entries as stored, in seq order, each with its hash (``None``: it has none)."""

        def work(connection: sqlite3.Connection) -> list[tuple[int, str, str | None]]:
            if not self._has_log:
                return []
            return connection.execute(_ROWS if self._has_chain else _ROWS_UNCHAINED, (conversation_id,)).fetchall()

        return [StoredRow(seq, text, hash_) for seq, text, hash_ in await self._run(work)]

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
        descriptor = self._open_lock_file(conversation_id)
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

    def _open_lock_file(self, conversation_id: str) -> int:
        """Open (creating) the conversation's lock file, and the lock folder when it is missing."""
        path = os.path.join(self._locks, _lock_name(conversation_id))
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            try:
                os.mkdir(self._locks)  # the database's own folder must exist: it is never made here
            except FileExistsError:
                pass
            except FileNotFoundError:
                raise StoreError(
                    f"SQLite store {str(self.path)!r}: the folder {str(self.path.parent)!r} does not exist"
                ) from None
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def watch(self, conversation_id: str | None = None) -> AbstractAsyncContextManager[Changes]:
        """Watch the appends to one conversation (``None``: to any).

        Appends made through this store object wake the watcher at once. A watch of one conversation also
        notices appends by other processes sharing the file: every :data:`WATCH_INTERVAL` seconds while it waits
        it asks SQLite, on the event loop, for ``PRAGMA data_version`` (which changes when another connection
        commits; a few microseconds), and only then for the conversation's last seq. A watch of every
        conversation asks the same, and yields ``None`` (any conversation may have changed) when another process
        committed: ``data_version`` says that the file changed, not which conversation, and SQLite has no
        notification across processes.
        """
        if self._closed:
            raise StoreClosed(f"the store at {str(self.path)!r} is closed")
        if conversation_id is None:
            return self._watch_all()
        return self._watch_one(conversation_id)

    @contextlib.asynccontextmanager
    async def _watch_all(self) -> AsyncIterator[Changes]:
        await self._run(_nothing)
        probe = _FileVersion(self)
        async with self._changes.watch(None, probe=probe, interval=WATCH_INTERVAL) as changes:
            yield changes

    @contextlib.asynccontextmanager
    async def _watch_one(self, conversation_id: str) -> AsyncIterator[Changes]:
        await self._run(_nothing)  # the probe runs on the loop, where the connection is never opened
        probe = _LastSeq(self, conversation_id)
        async with self._changes.watch(conversation_id, probe=probe, interval=WATCH_INTERVAL) as changes:
            yield changes

    async def aclose(self) -> None:
        """Close the connection (the last one to close checkpoints the write-ahead log into the database)."""
        self._closed = True
        self._changes.close()

        def work() -> None:
            with self._guard:
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None

        await anyio.to_thread.run_sync(work)


def _nothing(connection: sqlite3.Connection) -> None:
    """Work that only needs the connection open."""


class _FileVersion:
    """A watch's probe of every conversation: ``PRAGMA data_version``, which changes when another connection
    (another process) commits; ``None`` (nothing to say) when it cannot look at once."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._version: int | None = None

    def _look(self, connection: sqlite3.Connection) -> None:
        (self._version,) = connection.execute("PRAGMA data_version").fetchone()

    def __call__(self) -> int | None:
        try:
            self._store._use(self._look, False)
        except (_Busy, StoreError, StoreClosed):
            return None
        return self._version


class _LastSeq:
    """A watch's probe: the conversation's last seq, looked up again only when ``PRAGMA data_version`` says
    another connection committed since the last look; ``None`` (nothing to say) when it cannot look at once."""

    def __init__(self, store: SQLiteStore, conversation_id: str) -> None:
        self._store = store
        self._conversation_id = conversation_id
        self._version: int | None = None
        self._last: int | None = None

    def _look(self, connection: sqlite3.Connection) -> None:
        (version,) = connection.execute("PRAGMA data_version").fetchone()
        if version != self._version:
            (self._last,) = connection.execute(_LAST, (self._conversation_id,)).fetchone()
            self._version = version

    def __call__(self) -> int | None:
        try:
            self._store._use(self._look, False)
        except (_Busy, StoreError, StoreClosed):
            return None
        return self._last
