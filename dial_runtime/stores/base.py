"""What the durable event-log stores share, and :func:`open_store`, which picks one by URL (the protocol a
store satisfies is :class:`dial_runtime.ports.Store`, re-exported here).

A conversation's state is a fold over its log, so persisting the log is persisting the conversation. A store keeps
the logs of many conversations, keyed by conversation id; appends are optimistic (each names the sequence number it
expects to follow) and the per-conversation lock keeps two workers from driving one conversation at once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..errors import StoreClosed, StoreConflict
from ..ports import Store
from ..runtime.events import LogEntry, entry_from_dict, entry_to_dict

__all__ = ["Store", "StoreClosed", "StoreConflict", "check_entries", "decode", "encode", "open_store"]


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


def open_store(url: str) -> Store:
    """The store a URL names: ``memory:`` (or ``memory``), ``sqlite:relative/path.db`` or
    ``sqlite:///absolute/path.db``, ``postgresql://...`` or ``postgres://...`` (libpq's URI form).

    Nothing is opened yet: a store connects on first use. ``ValueError`` (naming the URL) for anything else.
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

        return SQLiteStore(rest)
    if scheme in ("postgresql", "postgres") and rest.startswith("//"):
        from .postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"store URL {url!r} is not one of memory:, sqlite:PATH, sqlite:///PATH, postgresql://... or postgres://..."
    )
