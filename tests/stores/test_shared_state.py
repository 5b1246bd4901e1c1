"""What the workers serving one store share through its database, on a real SQLite file and a real PostgreSQL
server: used decision-link tokens (each id marked once, whoever marks it, from several processes at once) and
detached runs (noted by one worker, read by another, for the run's own principal only)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dial_runtime.decisions.links import UsedTokens
from dial_runtime.stores import PostgresStore, SQLiteStore
from dial_runtime.stores.shared import (
    DETACH_KEPT,
    FORGET_AFTER,
    PostgresDetaches,
    PostgresUsedTokens,
    SQLiteDetaches,
    SQLiteUsedTokens,
)

IDS = [f"token-{n}" for n in range(40)]


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """A kind of store and where its database is (a file's path, or a server's URL in a schema of its own)."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "logs.db")
    return "postgres", str(request.getfixturevalue("pg_schema_url"))


KEEPERS: list[Any] = []


def keeper(kind: str, location: str) -> Any:
    """A keeper of the kind, closed when the test ends."""
    made = SQLiteUsedTokens(location) if kind == "sqlite" else PostgresUsedTokens(location)
    KEEPERS.append(made)
    return made


@pytest.fixture(autouse=True)
def closed() -> Iterator[None]:
    yield
    while KEEPERS:
        KEEPERS.pop().close()


def test_a_token_is_marked_used_once(where: tuple[str, str]) -> None:
    used: UsedTokens = keeper(*where)
    later = int(time.time()) + 600
    assert not used.is_used("a")
    assert used.mark_used("a", later) is True
    assert used.mark_used("a", later) is False
    assert used.is_used("a") and not used.is_used("b")
    again: UsedTokens = keeper(*where)  # another worker, or the same after a restart
    assert again.is_used("a") and again.mark_used("a", later) is False


def test_a_token_long_expired_is_forgotten(where: tuple[str, str]) -> None:
    used = keeper(*where)
    now = int(time.time())
    assert used.mark_used("old", now - FORGET_AFTER - 60)
    assert used.mark_used("recent", now - 60)  # expired, but within the day verifiers may still be behind by
    assert used.mark_used("new", now + 600)
    assert not used.is_used("old") and used.is_used("recent") and used.is_used("new")
    assert len(used) == 2


def test_the_stores_give_a_keeper_in_their_own_database(where: tuple[str, str]) -> None:
    kind, location = where
    store = SQLiteStore(location) if kind == "sqlite" else PostgresStore(location)
    used = store.used_tokens()
    KEEPERS.append(used)
    assert used.mark_used("x", int(time.time()) + 60)
    assert keeper(kind, location).is_used("x")


def _mark_all(kind: str, location: str, start: Any) -> list[str]:
    """In a process of its own: wait for the start, then mark every id, returning the ones this process marked."""
    used = keeper(kind, location)
    start.wait(30)
    try:
        return [token for token in IDS if used.mark_used(token, int(time.time()) + 600)]
    finally:
        used.close()


def test_workers_marking_the_same_tokens_at_once_mark_each_exactly_once(where: tuple[str, str]) -> None:
    kind, location = where  # the tables do not exist yet: the workers race to make them too
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(4) as pool:
            pending = [pool.apply_async(_mark_all, (kind, location, start)) for _ in range(4)]
            time.sleep(0.5)
            start.set()
            marked = [pending_result.get(timeout=60) for pending_result in pending]
    every = [token for each in marked for token in each]
    assert sorted(every) == sorted(IDS)  # each id marked by exactly one worker


def detaches(kind: str, location: str) -> Any:
    made = SQLiteDetaches(location) if kind == "sqlite" else PostgresDetaches(location)
    KEEPERS.append(made)
    return made


def test_a_detach_noted_by_one_worker_is_read_by_another_for_its_principal_only(where: tuple[str, str]) -> None:
    kind, location = where
    noting, reading = detaches(kind, location), detaches(kind, location)
    assert not reading.noted("c-1", "run-1", "ada")
    noting.note("c-1", "run-1", "ada")
    noting.note("c-1", "run-1", "ada")  # a beacon sent twice
    assert reading.noted("c-1", "run-1", "ada")
    assert not reading.noted("c-1", "run-1", "eve") and not reading.noted("c-2", "run-1", "ada")
    store = SQLiteStore(location) if kind == "sqlite" else PostgresStore(location)
    from_store = store.detaches()
    KEEPERS.append(from_store)
    assert from_store.noted("c-1", "run-1", "ada")


def test_a_detach_long_past_is_forgotten(where: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    kind, location = where
    kept = detaches(kind, location)
    kept.note("c-1", "old", "ada")
    later = time.time() + DETACH_KEPT + 60
    monkeypatch.setattr(time, "time", lambda: later)
    kept.note("c-1", "new", "ada")
    assert not kept.noted("c-1", "old", "ada") and kept.noted("c-1", "new", "ada")
