"""The PostgreSQL store: logs in one table any number of workers on any number of machines share."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread

try:
    import psycopg
    import psycopg.conninfo
except ImportError as error:
    raise ImportError("the PostgreSQL store needs psycopg 3: pip install 'dial-runtime[postgres]'") from error

from ..errors import ConversationBusy, StoreClosed, StoreConflict, StoreError
from ..runtime.events import LogEntry
from ..views.inbox import WaitingQuery, WaitingRow
from .base import ChangeFeed, Changes, check_entries, decode, encode, redact_url
from .chain import GENESIS, SCHEME, StoredRow, link_through
from .shared import PostgresDetaches, PostgresUsedTokens
from .waiting import query_sql

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dial_log (
    conversation_id text NOT NULL,
    seq bigint NOT NULL,
    time double precision NOT NULL,
    entry text NOT NULL,
    hash text,
    PRIMARY KEY (conversation_id, seq)
)
"""
# A table made before the chain existed gets its column (the rows it holds keep no hash).
_CHAIN_SCHEMA = "ALTER TABLE dial_log ADD COLUMN IF NOT EXISTS hash text"
_TABLES = """
SELECT to_regclass('dial_log') IS NULL, EXISTS (
    SELECT FROM pg_attribute WHERE attrelid = to_regclass('dial_log') AND attname = 'hash' AND NOT attisdropped
), to_regclass('dial_waiting') IS NOT NULL
"""
_WAITING_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS dial_waiting (
    conversation_id text NOT NULL,
    subject_id text NOT NULL,
    action text NOT NULL,
    since double precision NOT NULL,
    deadline double precision,
    roles text NOT NULL,
    approvers text NOT NULL,
    card text NOT NULL,
    PRIMARY KEY (conversation_id, subject_id)
)
""",
)
# The two-int4 advisory key space never meets the single-bigint one conversation locks use.
_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('dial_runtime'), hashtext('dial_log'))"
_LAST = "SELECT coalesce(max(seq), 0) FROM dial_log WHERE conversation_id = %s"
# One statement, so one transaction: the NOTIFY is sent when (and only if) the entries are committed. A statement
# in WITH runs to completion whatever the outer query reads; the outer query returns one row iff entries went in.
_APPEND = """
WITH appended AS (
    INSERT INTO dial_log (conversation_id, seq, time, entry)
    SELECT %(id)s::text, u.seq, u.time, u.entry
    FROM unnest(%(seqs)s::bigint[], %(times)s::double precision[], %(entries)s::text[]) AS u (seq, time, entry)
    WHERE (SELECT coalesce(max(seq), 0) FROM dial_log WHERE conversation_id = %(id)s::text) = %(expected)s
    RETURNING seq
)
SELECT count(*), pg_notify('dial_log', %(notice)s) FROM appended HAVING count(*) > 0
"""
# The same, with each entry's hash (see .chain) computed in the statement, so in the transaction that checks the
# seq: chained onto the stored hash of entry %(expected)s (GENESIS for the first entry; %(derived)s, the link the
# caller computed, when that entry has no hash), over each entry's text as stored. sha256() needs PostgreSQL 11
# or later.
_APPEND_CHAINED = """
WITH RECURSIVE
last AS (
    SELECT seq, hash FROM dial_log WHERE conversation_id = %(id)s::text ORDER BY seq DESC LIMIT 1
),
start AS (
    SELECT CASE WHEN %(expected)s::bigint = 0 THEN %(genesis)s::text
        ELSE coalesce((SELECT hash FROM last), %(derived)s::text) END AS hash
    WHERE coalesce((SELECT seq FROM last), 0) = %(expected)s::bigint
),
given AS (
    SELECT * FROM unnest(
        %(seqs)s::bigint[], %(times)s::double precision[], %(entries)s::text[]
    ) WITH ORDINALITY AS u (seq, time, entry, n)
),
chain (n, hash) AS (
    SELECT 0::bigint, hash FROM start WHERE hash IS NOT NULL
    UNION ALL
    SELECT given.n,
        %(scheme)s::text || encode(sha256(convert_to(chain.hash || E'\\n' || given.entry, 'UTF8')), 'hex')
    FROM chain JOIN given ON given.n = chain.n + 1
),
appended AS (
    INSERT INTO dial_log (conversation_id, seq, time, entry, hash)
    SELECT %(id)s::text, given.seq, given.time, given.entry, chain.hash FROM given JOIN chain USING (n)
    RETURNING seq
)
SELECT count(*), pg_notify('dial_log', %(notice)s) FROM appended HAVING count(*) > 0
"""
# What an append that changes the waiting rows adds to either statement above, before its last SELECT: the rows of
# the conversation not among %(w_ids)s go, the others are written (inserted or updated), all only when the entries
# went in. The statements of a WITH see one snapshot, so the rows kept are updated, never deleted and inserted.
_WAITING_WRITE = """,
cleared AS (
    DELETE FROM dial_waiting WHERE conversation_id = %(id)s::text
        AND NOT (subject_id = ANY(%(w_ids)s::text[])) AND EXISTS (SELECT FROM appended)
),
put AS (
    INSERT INTO dial_waiting (conversation_id, subject_id, action, since, deadline, roles, approvers, card)
    SELECT %(id)s::text, w.* FROM unnest(
        %(w_ids)s::text[], %(w_actions)s::text[], %(w_since)s::double precision[],
        %(w_deadlines)s::double precision[], %(w_roles)s::text[], %(w_approvers)s::text[], %(w_cards)s::text[]
    ) AS w WHERE EXISTS (SELECT FROM appended)
    ON CONFLICT (conversation_id, subject_id) DO UPDATE SET action = excluded.action, since = excluded.since,
        deadline = excluded.deadline, roles = excluded.roles, approvers = excluded.approvers, card = excluded.card
)
"""
_NOTIFY = "SELECT count(*), pg_notify('dial_log', %(notice)s) FROM appended HAVING count(*) > 0"


def _writing_waiting(statement: str) -> str:
    """``statement`` (an append) that also writes the conversation's waiting rows."""
    head, notify, tail = statement.rpartition(_NOTIFY)
    assert notify and not tail.strip()
    return head.rstrip() + _WAITING_WRITE + notify


_APPEND_WAITING = _writing_waiting(_APPEND)
_APPEND_CHAINED_WAITING = _writing_waiting(_APPEND_CHAINED)
_CLEAR_WAITING = "DELETE FROM dial_waiting WHERE conversation_id = %s"
_PUT_WAITING = (
    "INSERT INTO dial_waiting (conversation_id, subject_id, action, since, deadline, roles, approvers, card)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
_WAITING_CONVERSATIONS = "SELECT DISTINCT conversation_id FROM dial_waiting"
_TAIL = "SELECT seq, hash FROM dial_log WHERE conversation_id = %s ORDER BY seq DESC LIMIT 1"
_LAST_HASHED = """
SELECT seq, hash FROM dial_log WHERE conversation_id = %s AND seq <= %s AND hash IS NOT NULL
ORDER BY seq DESC LIMIT 1
"""
_TEXTS = "SELECT entry FROM dial_log WHERE conversation_id = %s AND seq > %s AND seq <= %s ORDER BY seq"
#: The channel appends notify (a notification's payload is the conversation's id).
CHANNEL = "dial_log"
#: The longest id a notification carries (PostgreSQL's payload limit is 8000 bytes); a longer one notifies an
#: empty payload, which wakes every watcher.
NOTICE_LIMIT = 7900
#: Seconds the listener waits for a notification before it checks whether the store closed; and before it tries
#: again after losing its connection.
LISTEN_POLL = 0.5
#: The longest a first watch waits for the listener to start listening before it is entered anyway (the listener
#: wakes every watcher once it listens, so an append made meanwhile is heard then).
LISTEN_READY = 5.0
_READ = "SELECT entry FROM dial_log WHERE conversation_id = %s AND seq > %s ORDER BY seq"
_ROWS = "SELECT seq, entry, hash FROM dial_log WHERE conversation_id = %s ORDER BY seq"
_ROWS_UNCHAINED = "SELECT seq, entry, NULL FROM dial_log WHERE conversation_id = %s ORDER BY seq"
_CONVERSATIONS = "SELECT DISTINCT conversation_id FROM dial_log"
_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"


def _link(connection: psycopg.Connection[Any], conversation_id: str, seq: int) -> str:
    """The chain's link at entry ``seq``, which has no hash: through the entries after the last one that has."""
    found = connection.execute(_LAST_HASHED, (conversation_id, seq)).fetchone()
    start, link = (found[0], found[1]) if found is not None else (0, GENESIS)
    texts = connection.execute(_TEXTS, (conversation_id, start, seq)).fetchall()
    return link_through(link, (text for (text,) in texts))


class _NoLog(Exception):
    """The database has no log table, and the store may not create it."""


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

    A server that cannot be reached or refuses the connection (a wrong password, a database that does not exist)
    is a :class:`StoreError` naming the URL with its password masked. ``create=False`` never creates the table: a
    database without it holds no conversation.

    The hash chain (:mod:`~dial_runtime.stores.chain`): each entry's hash is in the column ``hash``, computed by
    the append's one statement (so in its transaction, chained onto the stored hash of entry ``expected_seq``)
    over the entries' texts as stored; the server needs ``sha256()`` (PostgreSQL 11 or later). A table
    from before the chain gets the column when the store first connects (not with ``create=False``, which then
    appends without hashes); its rows keep none, and the first append chains onto them. ``chain=False`` writes
    no hashes (to measure what they cost; a chained log appended to so is reported as missing hashes).
    """

    def __init__(self, url: str, *, create: bool = True, chain: bool = True) -> None:
        self.url = url
        self.create = create
        self.chain = chain
        self._chained = False  # whether the table has the hash column (known once connected)
        self._has_waiting = False  # whether the database has the inbox's table (known once connected)
        self._connection: psycopg.Connection[Any] | None = None
        self._idle: list[psycopg.Connection[Any]] = []
        self._closed = False
        self._guard = threading.Lock()
        self._idle_guard = threading.Lock()
        self._changes = ChangeFeed()
        self._listener: threading.Thread | None = None
        self._listened = threading.Event()

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as error:
            raise self._error(error) from None

    def _error(self, error: psycopg.Error) -> StoreError:
        """A :class:`StoreError` saying what the server said, on one line, the URL's password masked."""
        said = " ".join(str(error).split()) or type(error).__name__
        password = psycopg.conninfo.conninfo_to_dict(self.url).get("password")
        if password:
            said = said.replace(str(password), "***")
        return StoreError(f"PostgreSQL store {redact_url(self.url)!r}: {said}")

    def _open(self) -> psycopg.Connection[Any]:
        connection = self._connect()
        try:
            with connection.transaction():
                row = connection.execute(_TABLES).fetchone()
                missing, chained, has_waiting = row if row is not None else (True, False, False)
                if not has_waiting and self.create:
                    connection.execute(_SCHEMA_LOCK)
                    for schema in _WAITING_SCHEMA:
                        connection.execute(schema)
                    has_waiting = True
                if missing:
                    if not self.create:
                        raise _NoLog
                    connection.execute(_SCHEMA_LOCK)
                    connection.execute(_SCHEMA)
                    connection.execute(_CHAIN_SCHEMA)  # another worker may have made the table without it
                    chained = True
                elif not chained and self.create:
                    connection.execute(_SCHEMA_LOCK)
                    connection.execute(_CHAIN_SCHEMA)
                    chained = True
            self._chained = bool(chained)
            self._has_waiting = bool(has_waiting)
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
            try:
                return work(self._connection)
            except psycopg.OperationalError as error:
                raise self._error(error) from None

    async def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        return await anyio.to_thread.run_sync(self._call, work)

    async def append(
        self,
        conversation_id: str,
        entries: Sequence[LogEntry],
        *,
        expected_seq: int,
        waiting: Sequence[WaitingRow] | None = None,
    ) -> None:
        """Append ``entries`` in one transaction iff the log ends at ``expected_seq``; else StoreConflict.
        ``waiting``, when given, becomes the conversation's waiting rows in the same statement."""
        check_entries(entries, expected_seq)
        params: dict[str, Any] = {
            "id": conversation_id,
            "seqs": [entry.seq for entry in entries],
            "times": [entry.time for entry in entries],
            "entries": [encode(entry) for entry in entries],
            "expected": expected_seq,
            "notice": conversation_id if len(conversation_id.encode()) <= NOTICE_LIMIT else "",
        }
        if self.chain:
            params.update(scheme=f"{SCHEME}:", genesis=GENESIS, derived=None)
        if waiting is not None:
            params.update(
                w_ids=[row[0] for row in waiting],
                w_actions=[row[1] for row in waiting],
                w_since=[row[2] for row in waiting],
                w_deadlines=[row[3] for row in waiting],
                w_roles=[row[4] for row in waiting],
                w_approvers=[row[5] for row in waiting],
                w_cards=[row[6] for row in waiting],
            )

        def insert(connection: psycopg.Connection[Any]) -> bool:
            chained = self.chain and self._chained
            if waiting is not None and self._has_waiting:
                statement = _APPEND_CHAINED_WAITING if chained else _APPEND_WAITING
            else:
                statement = _APPEND_CHAINED if chained else _APPEND
            try:
                row = connection.execute(statement, params, prepare=True).fetchone()
            except psycopg.errors.UniqueViolation:
                return False
            return row is not None and row[0] == len(entries)

        def work(connection: psycopg.Connection[Any]) -> bool:
            if not entries:
                last: int = _scalar(connection.execute(_LAST, (conversation_id,), prepare=True))
                return last == expected_seq
            if insert(connection):
                return True
            if not self.chain or not self._chained or expected_seq == 0:
                return False
            # Nothing went in: another writer got there first, or entry expected_seq has no hash to chain onto
            # (it predates the chain, or lost its hash). Then the link through it is computed here, and the
            # statement, which checks the seq again, is run once more.
            tail = connection.execute(_TAIL, (conversation_id,)).fetchone()
            if tail is None or tail[0] != expected_seq or tail[1] is not None:
                return False
            params["derived"] = _link(connection, conversation_id, expected_seq)
            return insert(connection)

        if not await self._run(work):
            raise StoreConflict(f"conversation {conversation_id!r} is not at seq {expected_seq}")

    async def read(self, conversation_id: str, *, after_seq: int = 0) -> list[LogEntry]:
        """The entries after ``after_seq``, in order."""

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(_READ, (conversation_id, after_seq), prepare=True).fetchall()

        return [decode(text) for (text,) in await self._read(work)]

    async def _read(
        self, work: Callable[[psycopg.Connection[Any]], list[tuple[Any, ...]]]
    ) -> list[tuple[Any, ...]]:
        """Rows a read returns; none from a database without the log table, when the store may not create it."""
        try:
            return await self._run(work)
        except _NoLog:
            return []

    async def waiting(self, query: WaitingQuery) -> list[tuple[str, str]]:
        """The waiting rows ``query`` finds (see :class:`~dial_runtime.views.inbox.WaitingQuery`)."""
        sql, params = query_sql(query, "%s", "strpos")

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            if not self._has_waiting:
                return []
            return connection.execute(sql, params, prepare=True).fetchall()

        return [(conversation_id, card) for conversation_id, card in await self._read(work)]

    async def keep_waiting(self, conversation_id: str, rows: Sequence[WaitingRow], *, at_seq: int) -> bool:
        """Make ``rows`` the conversation's waiting rows iff its log ends at ``at_seq``, in one transaction. An
        append committed between the check and the write would be overwritten with older rows: hold the
        conversation (:meth:`lock`) from reading its log to this, as ``dial-runtime inbox --rebuild`` does."""

        def work(connection: psycopg.Connection[Any]) -> bool:
            with connection.transaction():
                last = _scalar(connection.execute(_LAST, (conversation_id,)))
                if last != at_seq:
                    return False
                connection.execute(_CLEAR_WAITING, (conversation_id,))
                if rows:
                    connection.cursor().executemany(_PUT_WAITING, [(conversation_id, *row) for row in rows])
            return True

        with anyio.CancelScope(shield=True):
            kept = await self._run(work)
        return kept

    async def waiting_conversations(self) -> list[str]:
        """The ids of the conversations with waiting rows, sorted by code point."""

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            if not self._has_waiting:
                return []
            return connection.execute(_WAITING_CONVERSATIONS).fetchall()

        return sorted(conversation_id for (conversation_id,) in await self._read(work))

    def used_tokens(self) -> PostgresUsedTokens:
        """A keeper of used decision-link tokens in this store's database (see :mod:`~dial_runtime.stores.shared`):
        what every worker serving the store shares."""
        return PostgresUsedTokens(self.url)

    def detaches(self) -> PostgresDetaches:
        """A keeper of the runs asked to go on without their client, in this store's database (see
        :mod:`~dial_runtime.stores.shared`): how a detach that reaches another worker reaches the run's."""
        return PostgresDetaches(self.url)

    async def rows(self, conversation_id: str) -> list[StoredRow]:
        """The conversation's entries as stored, in seq order, each with its hash (``None``: it has none)."""

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            query = _ROWS if self._chained else _ROWS_UNCHAINED
            return connection.execute(query, (conversation_id,), prepare=True).fetchall()

        return [StoredRow(seq, text, hash_) for seq, text, hash_ in await self._read(work)]

    async def conversations(self) -> list[str]:
        """The ids of the conversations with entries, sorted by code point (not by the database's collation)."""

        def work(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(_CONVERSATIONS).fetchall()

        return sorted(conversation_id for (conversation_id,) in await self._read(work))

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

    def watch(self, conversation_id: str | None = None) -> AbstractAsyncContextManager[Changes]:
        """Watch the appends to one conversation (``None``: to any), by any worker on any machine.

        Every append sends ``NOTIFY dial_log, '<conversation id>'`` in its own transaction, so a notification
        goes out exactly when entries are committed. The first watch starts the store's listener: a thread with
        a connection of its own, listening on the channel (``LISTEN``), that wakes this process's watchers. A
        watch is entered once the listener is listening (or its first try failed, or :data:`LISTEN_READY` seconds
        passed), so every append committed after it began wakes it. Each time the listener starts listening, on
        its first connection or after losing one, it wakes every watcher (``None``: notifications may have been
        missed). The channel is per database: stores of other schemas in the same database wake watchers of a
        conversation with the same id too, which costs a read that finds nothing new.
        """
        if self._closed:
            raise StoreClosed("the PostgreSQL store is closed")
        with self._idle_guard:
            if self._listener is None:
                self._listener = threading.Thread(target=self._listen, name="dial-runtime LISTEN", daemon=True)
                self._listener.start()
        return self._watch(conversation_id)

    @asynccontextmanager
    async def _watch(self, conversation_id: str | None) -> AsyncIterator[Changes]:
        if not self._listened.is_set():
            await anyio.to_thread.run_sync(self._listened.wait, LISTEN_READY, abandon_on_cancel=True)
        async with self._changes.watch(conversation_id) as changes:
            yield changes

    def _listen(self) -> None:
        """The listener thread: relay each notification to the watchers until the store closes."""
        connection: psycopg.Connection[Any] | None = None
        while not self._closed:
            try:
                if connection is None or connection.closed:
                    try:
                        connection = psycopg.connect(self.url, autocommit=True)
                        connection.execute(f"LISTEN {CHANNEL}")
                    finally:
                        self._listened.set()
                    self._changes.publish(None)
                for notice in connection.notifies(timeout=LISTEN_POLL):
                    self._changes.publish(notice.payload or None)
                    if self._closed:
                        break
            except psycopg.Error:
                if connection is not None:
                    connection.close()
                connection = None
                time.sleep(LISTEN_POLL)
        if connection is not None:
            connection.close()

    async def aclose(self) -> None:
        """Close the connections, end every watch and stop the listener; locks still held close theirs when
        released."""

        def work() -> None:
            with self._guard, self._idle_guard:
                self._closed = True
                idle, self._idle = self._idle, []
                connection, self._connection = self._connection, None
            for each in [*idle, *([connection] if connection is not None else [])]:
                each.close()
            if self._listener is not None:
                self._listener.join(timeout=2 * LISTEN_POLL)

        self._closed = True
        self._changes.close()
        await anyio.to_thread.run_sync(work)
