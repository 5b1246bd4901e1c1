"""Shared fixtures: both anyio backends, trio with virtual time (or real clocks, for the store tests); a store
URL of each kind."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Callable, Generator
from pathlib import Path

import pytest
import trio.testing

from dial_runtime.stores import StorePort

from .browser import browser, context  # noqa: F401  (headless Chromium, and a fresh context of it per test)
from .pg import pg_schema_url, postgres_url  # noqa: F401  (a PostgreSQL server, and a fresh schema on it)

#: The fast subset, ``pytest -m fast`` (about 40 seconds on two cores): the language, the machines, the fold and
#: the core, the views and the architecture. A contributor runs it first; the whole suite takes a dozen minutes.
FAST = frozenset(
    {
        "test_parser", "test_parser_candidates", "test_parser_hardening", "test_parser_stream", "test_schema",
        "test_schema_coverage", "test_payloads", "test_outcomes", "test_json_ready", "test_statemachines",
        "test_fold", "test_core", "test_log", "test_records", "test_policy", "test_one_truth", "test_deferred",
        "test_runtime", "test_projection", "test_views", "test_layers", "test_exports", "test_imports",
        "test_errors", "test_rule_site",
    }
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of the fast subset (:data:`FAST`) ``fast``."""
    for item in items:
        if item.path.stem in FAST:
            item.add_marker(pytest.mark.fast)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """With ``DIAL_NO_SKIPS=1`` (CI sets it) a test skipped for a missing component (Graphviz, the llama.cpp
    server, pydantic, ...) fails instead: there, everything the suite needs is installed, so a skip is a gap."""
    report = yield
    assert isinstance(report, pytest.TestReport)
    if os.environ.get("DIAL_NO_SKIPS") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but DIAL_NO_SKIPS=1 requires every component: {report.longrepr}"
    return report


@pytest.fixture(
    params=[
        pytest.param(("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio"),
        pytest.param(("asyncio", {}), id="asyncio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Every async test runs on trio (virtual clock: timeouts pass instantly) and on asyncio."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=["trio", "asyncio"])
def real_clocks(request: pytest.FixtureRequest) -> str:
    """Both backends on real clocks: a module whose tests wait on threads, processes or servers overrides
    ``anyio_backend`` with this."""
    return request.param  # type: ignore[no-any-return]


#: The kinds of store, the in-process one first.
STORE_KINDS = ["memory", "sqlite", "postgres"]


def _store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'logs.db'}"
    return request.getfixturevalue("pg_schema_url")  # type: ignore[no-any-return]


@pytest.fixture(params=STORE_KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL of each kind, naming an empty log."""
    return _store_url(request, tmp_path)


@pytest.fixture
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL other processes can reach (``sqlite`` or ``postgres``, given indirectly)."""
    return _store_url(request, tmp_path)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A throwaway git repository with one staged file (mcp-server-git's, proxied or as a domain)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for command in (["init", "-q"], ["config", "user.email", "ada@example.com"], ["config", "user.name", "Ada"]):
        subprocess.run(["git", *command], cwd=repo, check=True, timeout=30)
    (repo / "notes.txt").write_text("buy milk\n", encoding="utf-8")
    subprocess.run(["git", "add", "notes.txt"], cwd=repo, check=True, timeout=30)
    return repo


@pytest.fixture
async def keep() -> AsyncIterator[Callable[[StorePort], StorePort]]:
    """Remembers the stores a test opens, and closes them when it ends, passed or failed."""
    opened: list[StorePort] = []

    def remember(store: StorePort) -> StorePort:
        opened.append(store)
        return store

    yield remember
    for store in opened:
        await store.aclose()
