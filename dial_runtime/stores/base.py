"""What the durable event-log stores share, and :func:`open_store`, which picks one by URL (the protocol a
store satisfies is :class:`dial_runtime.ports.Store`, re-exported here).

A conversation's state is a fold over its log, so persisting the log is persisting the conversation. A store keeps
the logs of many conversations, keyed by conversation id; appends are optimistic (each names the sequence number it
expects to follow) and the per-conversation lock keeps two workers from driving one conversation at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ..errors import StoreClosed, StoreConflict, StoreError
from ..ports import Store
from ..runtime.events import LogEntry, entry_from_dict, entry_to_dict

__all__ = [
    "Store",
    "StoreClosed",
    "StoreConflict",
    "StoreError",
    "check_entries",
    "decode",
    "encode",
    "open_store",
    "redact_url",
]


def check_entries(entries: Sequence[LogEntry], expected_seq: int) -> None:
    """Refuse entries that do not number on from ``expected_seq``: a log has no gaps and no repeats."""
    for offset, entry in enumerate(entries, start=1):
        if entry.seq != expected_seq + offset:
            raise ValueError(f"entry {offset} has seq {entry.seq}, expected {expected_seq + offset}")


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def encode(entry: LogEntry) -> str:
    """An entry as compact JSON text (a text column, not a JSON type: Python's JSON, ``NaN`` included, round-trips
    exactly, and the escapes keep NUL, which PostgreSQL's text cannot hold, and lone surrogates storable)."""
    return _COMPACT.encode(entry_to_dict(entry))


def decode(text: str) -> LogEntry:
    """The entry :func:`encode` wrote."""
    return entry_from_dict(json.loads(text))


def redact_url(url: str) -> str:
    """``url`` fit to show: a password in its user part (``user:PASSWORD@``) or its query (``password=``)
    becomes ``***``; everything else is kept as written."""
    url = _USER_PASSWORD.sub(r"\1:***@", url, count=1)
    return _QUERY_PASSWORD.sub(r"\1password=***", url)


_USER_PASSWORD = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#@:]*):[^/?#]*@")
_QUERY_PASSWORD = re.compile(r"([?&])password=[^&#]*")


def open_store(url: str, *, create: bool = True) -> Store:
    """The store a URL names: ``memory:`` (or ``memory``), ``sqlite:relative/path.db`` or
    ``sqlite:///absolute/path.db``, ``postgresql://...`` or ``postgres://...`` (libpq's URI form).

    Nothing is opened yet: a store connects on first use, and raises :class:`StoreError` then when it cannot.
    ``create=False`` opens a store only to read it: it never creates a database file, a table or a lock file
    (a SQLite file that does not exist is a :class:`StoreError`; a database without the log table holds no
    conversation). ``ValueError`` (naming the URL, its password masked) for a URL of no known form.
    """
    scheme, colon, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme == "memory" and not rest:
        from .memory import MemoryStore

        return MemoryStore()
    if scheme == "sqlite" and colon:
        if rest.startswith("///"):
            rest = rest[2:]
        elif rest.startswith("//"):
            raise ValueError(f"store URL {url!r}: a SQLite URL has no host (use sqlite:path or sqlite:///path)")
        if not rest:
            raise ValueError(f"store URL {url!r}: a SQLite URL needs a file path")
        from .sqlite import SQLiteStore

        return SQLiteStore(rest, create=create)
    if scheme in ("postgresql", "postgres") and rest.startswith("//"):
        from .postgres import PostgresStore

        return PostgresStore(url, create=create)
    raise ValueError(
        f"store URL {redact_url(url)!r} is not one of memory:, sqlite:PATH, sqlite:///PATH, postgresql://... or postgres://..."
    )
