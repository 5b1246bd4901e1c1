"""What the door tests share: asyncio (the frameworks' and servers' loop), and a SQLite store per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from dial_runtime.stores import StorePort, open_store


@pytest.fixture
def anyio_backend() -> str:
    """Real time on asyncio: the frameworks run on it, and the servers are other processes or threads."""
    return "asyncio"


@pytest.fixture
async def store(tmp_path: Path, keep: Callable[[StorePort], StorePort]) -> AsyncIterator[StorePort]:
    yield keep(open_store(f"sqlite:{tmp_path / 'approvals.db'}"))
