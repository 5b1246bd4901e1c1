"""Durable homes for conversation logs: pick one with :func:`open_store` (``memory:``, ``sqlite:PATH``,
``postgresql://...``).

Every store chains the entries it appends with hashes, so that a log changed behind its back shows it
(:mod:`~dial_runtime.stores.chain`: :func:`verify_store`, :func:`verify_log`); a chain's head can be signed
(:mod:`~dial_runtime.stores.signing`, which needs cryptography).

:class:`PostgresStore` needs psycopg 3 (the ``postgres`` extra); it is imported only when asked for.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import StoreClosed, StoreConflict, StoreError
from .base import StorePort, redact_url
from .chain import ChainBreak, ChainCheck, ChainedStorePort, ChainReport, StoredRow, verify_log, verify_store
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "ChainBreak",
    "ChainCheck",
    "ChainReport",
    "ChainedStorePort",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "StoreClosed",
    "StoreConflict",
    "StoreError",
    "StorePort",
    "StoredRow",
    "open_store",
    "redact_url",
    "verify_log",
    "verify_store",
]

__getattr__, __dir__ = lazy_exports(__name__, {"PostgresStore": ".postgres"}, globals())


def open_store(url: str, *, create: bool = True) -> StorePort:
    """The store a URL names: ``memory:`` (or ``memory``), ``sqlite:relative/path.db`` or
    ``sqlite:///absolute/path.db`` (``?synchronous=full``: every commit synced to disk, see
    :class:`SQLiteStore`), ``postgresql://...`` or ``postgres://...`` (libpq's URI form).

    Nothing is opened yet: a store connects on first use, and raises :class:`StoreError` then when it cannot.
    ``create=False`` opens a store only to read it: it never creates a database file, a table or a lock file
    (a SQLite file that does not exist is a :class:`StoreError`; a database without the log table holds no
    conversation). ``ValueError`` (naming the URL, its password masked) for a URL of no known form.
    """
    scheme, colon, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme == "memory" and not rest:
        return MemoryStore()
    if scheme == "sqlite" and colon:
        if rest.startswith("///"):
            rest = rest[2:]
        elif rest.startswith("//"):
            raise ValueError(f"store URL {url!r}: a SQLite URL has no host (use sqlite:path or sqlite:///path)")
        rest, _, query = rest.partition("?")
        if not rest:
            raise ValueError(f"store URL {url!r}: a SQLite URL needs a file path")
        options = urllib.parse.parse_qs(query, keep_blank_values=True)
        synchronous = [value.lower() for value in options.pop("synchronous", ["normal"])]
        if options or synchronous not in (["normal"], ["full"]):
            raise ValueError(f"store URL {url!r}: a SQLite URL's only option is synchronous=normal or =full")
        return SQLiteStore(rest, create=create, durability="full" if synchronous == ["full"] else "normal")
    if scheme in ("postgresql", "postgres") and rest.startswith("//"):
        from .postgres import PostgresStore

        return PostgresStore(url, create=create)
    raise ValueError(
        f"store URL {redact_url(url)!r} is not one of memory:, sqlite:PATH, sqlite:///PATH, postgresql://... or postgres://..."
    )
