"""What the workers serving one store share through its own database, beside its logs: the decision-link tokens
used already (each link is used once across every worker and restart, :class:`~dial_runtime.links.UsedTokens`),
and the runs whose page went away asking them to go on (a detach that reached another worker than the run's).

- ``dial_used_tokens``: a token id (the primary key) and its expiry in Unix seconds. Marking a token used is one
  ``INSERT ... ON CONFLICT DO NOTHING``: of any number of workers marking the same id at once, the database lets
  exactly one insert it, and only that one is told ``True``. A row is forgotten a day after its token expired
  (:data:`FORGET_AFTER`): the link is then refused as expired by every verifier whose clock is within that of the
  signer's.
- ``dial_detached_runs``: a conversation, a run id and the principal who asked, when. The worker serving the run
  reads it once the run's client has gone and the grace has passed, and lets the run go on only when the
  principal is the run's own. A row is forgotten an hour after it was written (:data:`DETACH_KEPT`).

The methods are plain calls that wait on the database (a few hundred microseconds on one machine): an async caller
runs them in a worker thread, as the web surface does.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from ..errors import StoreError
from .base import redact_url

__all__ = [
    "DETACH_KEPT",
    "FORGET_AFTER",
    "PostgresDetaches",
    "PostgresUsedTokens",
    "SQLiteDetaches",
    "SQLiteUsedTokens",
]

#: Seconds after a token's expiry before its id is forgotten.
FORGET_AFTER = 86_400

#: Seconds a detach is kept (a run goes on for at most a call's budget after its client went).
DETACH_KEPT = 3_600

#: The advisory lock PostgreSQL's tables are made under.
_LOCK = "dial_runtime.stores.shared"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS dial_used_tokens (token_id TEXT PRIMARY KEY, expires_at BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS dial_used_tokens_expiry ON dial_used_tokens (expires_at)",
    "CREATE TABLE IF NOT EXISTS dial_detached_runs (conversation_id TEXT NOT NULL, run_id TEXT NOT NULL, "
    "principal TEXT NOT NULL, at BIGINT NOT NULL, PRIMARY KEY (conversation_id, run_id, principal))",
)


class _SQLite:
    """A SQLite file's tables of shared state: each call is its own connection's transaction, waiting up to
    ``busy_timeout`` seconds for another writer (safe across threads and processes)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._ready = False

    def run(self, statements: list[tuple[str, tuple[Any, ...]]]) -> _Done:
        """Run ``statements`` in one immediate transaction; what the last one did."""
        try:
            connection = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
        except sqlite3.Error as error:
            raise StoreError(f"shared state in {str(self.path)!r}: {error}") from error
        try:
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                if not self._ready:
                    for schema in _SCHEMA:
                        connection.execute(schema)
                cursor = None
                for query, params in statements:
                    cursor = connection.execute(query, params)
                assert cursor is not None
                rows = cursor.fetchall()
            self._ready = True
            return _Done(cursor.rowcount, rows)
        except sqlite3.Error as error:
            raise StoreError(f"shared state in {str(self.path)!r}: {error}") from error
        finally:
            connection.close()

    def close(self) -> None:
        """Nothing to close: each call opens and closes its own connection."""


class _Postgres:
    """A PostgreSQL database's tables of shared state: one connection of its own, in autocommit, used by one
    thread at a time and made again when it was lost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._connection: Any = None
        self._lock = threading.Lock()

    def run(self, statements: list[tuple[str, tuple[Any, ...]]]) -> _Done:
        """Run ``statements`` (written with sqlite3's ``?`` placeholders) in one transaction; what the last one
        did."""
        import psycopg

        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._connection is None or self._connection.closed:
                        self._connection = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
                        with self._connection.transaction():  # two workers creating at once would conflict
                            self._connection.execute(
                                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_LOCK,)
                            )
                            for schema in _SCHEMA:
                                self._connection.execute(schema)
                    with self._connection.transaction():
                        cursor = None
                        for query, params in statements:
                            cursor = self._connection.execute(query.replace("?", "%s"), params)
                        assert cursor is not None
                        return _Done(cursor.rowcount, cursor.fetchall() if cursor.description else [])
                except psycopg.OperationalError as error:
                    self._connection = None  # the server went away: one more try on a new connection
                    if attempt == 2:
                        raise StoreError(f"shared state in {redact_url(self.url)}: {error}") from error
                except psycopg.Error as error:
                    raise StoreError(f"shared state in {redact_url(self.url)}: {error}") from error
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class _Done:
    """What a statement did: the rows it changed and the rows it gave."""

    def __init__(self, rowcount: int, rows: list[Any]) -> None:
        self.rowcount = rowcount
        self.rows = rows


class _Database(Protocol):
    def run(self, statements: list[tuple[str, tuple[Any, ...]]]) -> _Done: ...

    def close(self) -> None: ...


class _Kept:
    """State kept in a database's table of shared state."""

    def __init__(self, database: _Database) -> None:
        self._database = database

    def close(self) -> None:
        self._database.close()


class _UsedTokens(_Kept):
    """:class:`~dial_runtime.links.UsedTokens` on a database's ``dial_used_tokens``."""

    def is_used(self, token_id: str) -> bool:
        done = self._database.run([("SELECT 1 FROM dial_used_tokens WHERE token_id = ?", (token_id,))])
        return bool(done.rows)

    def mark_used(self, token_id: str, expires_at: int) -> bool:
        done = self._database.run(
            [
                ("DELETE FROM dial_used_tokens WHERE expires_at < ?", (int(time.time()) - FORGET_AFTER,)),
                (
                    "INSERT INTO dial_used_tokens (token_id, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (token_id, expires_at),
                ),
            ]
        )
        return bool(done.rowcount == 1)

    def __len__(self) -> int:
        done = self._database.run([("SELECT count(*) FROM dial_used_tokens", ())])
        return int(done.rows[0][0])


class _Detaches(_Kept):
    """The runs asked to go on without their client, on a database's ``dial_detached_runs``."""

    def note(self, conversation_id: str, run_id: str, principal: str) -> None:
        """Keep that ``principal`` asked for the run ``run_id`` of ``conversation_id`` to go on without its
        client."""
        self._database.run(
            [
                ("DELETE FROM dial_detached_runs WHERE at < ?", (int(time.time()) - DETACH_KEPT,)),
                (
                    "INSERT INTO dial_detached_runs (conversation_id, run_id, principal, at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (conversation_id, run_id, principal, int(time.time())),
                ),
            ]
        )

    def noted(self, conversation_id: str, run_id: str, principal: str) -> bool:
        """Whether ``principal`` asked for the run to go on (another principal's asking counts for nothing)."""
        done = self._database.run(
            [
                (
                    "SELECT 1 FROM dial_detached_runs WHERE conversation_id = ? AND run_id = ? AND principal = ?",
                    (conversation_id, run_id, principal),
                )
            ]
        )
        return bool(done.rows)


class SQLiteUsedTokens(_UsedTokens):
    """Used token ids in a SQLite file (the :class:`~dial_runtime.stores.SQLiteStore`'s own, or any)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        super().__init__(_SQLite(path, busy_timeout=busy_timeout))


class PostgresUsedTokens(_UsedTokens):
    """Used token ids in a PostgreSQL database (the :class:`~dial_runtime.stores.PostgresStore`'s own, or any)."""

    def __init__(self, url: str) -> None:
        super().__init__(_Postgres(url))


class SQLiteDetaches(_Detaches):
    """Detached runs in a SQLite file (the :class:`~dial_runtime.stores.SQLiteStore`'s own, or any)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        super().__init__(_SQLite(path, busy_timeout=busy_timeout))


class PostgresDetaches(_Detaches):
    """Detached runs in a PostgreSQL database (the :class:`~dial_runtime.stores.PostgresStore`'s own, or any)."""

    def __init__(self, url: str) -> None:
        super().__init__(_Postgres(url))
