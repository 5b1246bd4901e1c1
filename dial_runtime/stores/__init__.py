"""Durable homes for conversation logs: pick one with :func:`open_store` (``memory:``, ``sqlite:PATH``,
``postgresql://...``).

:class:`PostgresStore` needs psycopg 3 (the ``postgres`` extra); it is imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import StoreClosed, StoreConflict
from .base import Store, open_store
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = ["MemoryStore", "PostgresStore", "SQLiteStore", "Store", "StoreClosed", "StoreConflict", "open_store"]

__getattr__, __dir__ = lazy_exports(__name__, {"PostgresStore": ".postgres"}, globals())
