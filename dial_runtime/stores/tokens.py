"""Used decision-link tokens kept in a store's own database, so each link is used once across every worker and
restart (:class:`~dial_runtime.links.UsedTokens`).

Each token id is a row of the table ``dial_used_tokens`` (``token_id`` the primary key, ``expires_at`` the token's
expiry in Unix seconds), beside the store's ``dial_log``. Marking a token used is one ``INSERT ... ON CONFLICT DO
NOTHING``: of any number of workers marking the same id at once, the database lets exactly one insert it, and
only that one is told ``True``. A row is forgotten a day after its token expired (:data:`FORGET_AFTER`): the link
is then refused as expired by every verifier whose clock is within that of the signer's.

The methods are plain calls that wait on the database (a few hundred microseconds on one machine): an async caller
runs them in a worker thread, as the web surface does.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .base import redact_url

__all__ = ["FORGET_AFTER", "PostgresUsedTokens", "SQLiteUsedTokens"]

#: Seconds after a token's expiry before its id is forgotten.
FORGET_AFTER = 86_400

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dial_used_tokens (token_id TEXT PRIMARY KEY, expires_at BIGINT NOT NULL)
"""
_INDEX = "CREATE INDEX IF NOT EXISTS dial_used_tokens_expiry ON dial_used_tokens (expires_at)"


class SQLiteUsedTokens:
    """Used token ids in a SQLite file (the :class:`~dial_runtime.stores.SQLiteStore`'s own, or any), safe across
    threads and processes: each call is its own connection's transaction, waiting up to ``busy_timeout`` seconds
    for another writer."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
            if not self._ready:
                connection.execute(_SCHEMA)
                connection.execute(_INDEX)
                self._ready = True
        except sqlite3.Error as error:
            raise StoreError(f"used tokens in {str(self.path)!r}: {error}") from error
        return connection

    def is_used(self, token_id: str) -> bool:
        connection = self._connect()
        try:
            found = connection.execute("SELECT 1 FROM dial_used_tokens WHERE token_id = ?", (token_id,))
            return found.fetchone() is not None
        finally:
            connection.close()

    def mark_used(self, token_id: str, expires_at: int) -> bool:
        connection = self._connect()
        try:
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("DELETE FROM dial_used_tokens WHERE expires_at < ?", (_forget_before(),))
                inserted = connection.execute(
                    "INSERT INTO dial_used_tokens (token_id, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (token_id, expires_at),
                )
                return inserted.rowcount == 1
        except sqlite3.Error as error:
            raise StoreError(f"used tokens in {str(self.path)!r}: {error}") from error
        finally:
            connection.close()

    def close(self) -> None:
        """Nothing to close: each call opens and closes its own connection."""

    def __len__(self) -> int:
        connection = self._connect()
        try:
            (count,) = connection.execute("SELECT count(*) FROM dial_used_tokens").fetchone()
            return int(count)
        finally:
            connection.close()


class PostgresUsedTokens:
    """Used token ids in a PostgreSQL database (the :class:`~dial_runtime.stores.PostgresStore`'s own, or any):
    one connection of its own, in autocommit, used by one thread at a time and made again when it was lost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._connection: Any = None
        self._lock = threading.Lock()

    def _execute(self, query: str, params: tuple[Any, ...]) -> Any:
        import psycopg

        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._connection is None or self._connection.closed:
                        self._connection = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
                        self._connection.execute(_SCHEMA)
                        self._connection.execute(_INDEX)
                    return self._connection.execute(query, params)
                except psycopg.OperationalError as error:
                    self._connection = None  # the server went away: one more try on a new connection
                    if attempt == 2:
                        raise StoreError(f"used tokens in {redact_url(self.url)}: {error}") from error
        raise AssertionError("unreachable")

    def is_used(self, token_id: str) -> bool:
        found = self._execute("SELECT 1 FROM dial_used_tokens WHERE token_id = %s", (token_id,))
        return found.fetchone() is not None

    def mark_used(self, token_id: str, expires_at: int) -> bool:
        inserted = self._execute(
            "WITH gone AS (DELETE FROM dial_used_tokens WHERE expires_at < %s) "
            "INSERT INTO dial_used_tokens (token_id, expires_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (_forget_before(), token_id, expires_at),
        )
        return bool(inserted.rowcount == 1)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __len__(self) -> int:
        (count,) = self._execute("SELECT count(*) FROM dial_used_tokens", ()).fetchone()
        return int(count)


def _forget_before() -> int:
    return int(time.time()) - FORGET_AFTER
