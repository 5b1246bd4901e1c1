"""Durable homes for conversation logs: pick one with :func:`open_store` (``memory:``, ``sqlite:PATH``,
``postgresql://...``).

:class:`PostgresStore` needs psycopg 3 (the ``postgres`` extra); it is imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Store, StoreConflict, StoreError, open_store, redact_url
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "StoreConflict",
    "StoreError",
    "open_store",
    "redact_url",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
