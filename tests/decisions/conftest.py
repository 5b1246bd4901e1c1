"""The inbox's tests share one fixture: a store of each kind, closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dial_runtime.stores import StorePort, open_store


@pytest.fixture
async def store(url: str) -> AsyncIterator[StorePort]:
    """An open store on ``url`` (in-process, SQLite, PostgreSQL), closed after the test."""
    opened = open_store(url)
    try:
        yield opened
    finally:
        await opened.aclose()
