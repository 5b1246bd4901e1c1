"""Shared fixtures: both anyio backends, trio with virtual time."""

from __future__ import annotations

import pytest
import trio.testing

from .pg import pg_schema_url, postgres_url  # noqa: F401  (a PostgreSQL server, and a fresh schema on it)


@pytest.fixture(
    params=[
        pytest.param(("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio"),
        pytest.param(("asyncio", {}), id="asyncio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Every async test runs on trio (virtual clock: timeouts pass instantly) and on asyncio."""
    return request.param  # type: ignore[no-any-return]
