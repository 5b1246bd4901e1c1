"""One single-use link, many hands at once: a link issued to a role, posted to ``/decide`` at the same moment by
every holder of that role, through two workers serving one store (SQLite, PostgreSQL), counts at most one
decision, and an action whose policy needs more approvals than one link gives never runs from it."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import anyio
import httpx
import pytest

from dial_runtime import ActionSpec, ApprovalPolicy, LogEntry, open_store
from dial_runtime.decisions.links import Keyring
from dial_runtime.web import create_app, scripted_agents

from ..web_domains import WebNotes
from ..web_links_setup import ACK, ADD, digest_of, issue, new_keyring, start
from ..web_server import serving

HOLDERS = [f"op{n}" for n in range(8)]
CARDS = 4


class OpsNotes(WebNotes):
    """The notebook, whose notes are added once three people holding ``ops`` approve."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **WebNotes.actions,
        "add-note": ActionSpec(mutates=True, policy=ApprovalPolicy(approvals=3, roles=frozenset({"ops"}))),
    }


@contextlib.contextmanager
def ops_app(url: str, scripts: dict[str, list[str]], keyring: Keyring) -> Iterator[str]:
    """The web surface on the store at ``url``, served, where ``X-User`` names the caller and every ``op<N>``
    holds ``ops``: its base URL; the store is closed after."""
    store = open_store(url)
    app = create_app(
        store=store,
        domain=OpsNotes(),
        agent=scripted_agents(scripts),
        auth=lambda request: str(request.headers.get("x-user", "ada")),
        roles=lambda who: {"ops"} if who.startswith("op") else set(),
        links=keyring,
        deadlines=None,
    )
    try:
        with serving(app, lifespan="on") as served:
            yield served
    finally:
        anyio.run(store.aclose)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'race.db'}"
    else:
        yield request.getfixturevalue("pg_schema_url")


def stored(store: str, thread: str) -> list[LogEntry]:
    """The conversation's log as the store holds it, read on a thread of its own."""

    async def read() -> list[LogEntry]:
        opened = open_store(store)
        try:
            return list(await opened.read(thread))
        finally:
            await opened.aclose()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, read).result(timeout=30)


def race(urls: list[str], token: str) -> list[httpx.Response]:
    """Every holder posts the token's accept at once, alternately through each worker."""
    start_line = threading.Barrier(len(HOLDERS))

    def post(index: int) -> httpx.Response:
        with httpx.Client(base_url=urls[index % len(urls)], timeout=30.0) as http:
            start_line.wait(timeout=30)
            return http.post(
                "/decide", json={"token": token, "decision": "accept"}, headers={"x-user": HOLDERS[index]}
            )

    with concurrent.futures.ThreadPoolExecutor(len(HOLDERS)) as pool:
        return list(pool.map(post, range(len(HOLDERS))))


def test_a_raced_role_link_counts_one_approval_on_every_store_and_worker(store_url: str) -> None:
    scripts: dict[str, list[str]] = {}
    keyring = new_keyring()
    with (
        ops_app(store_url, scripts, keyring) as one,
        ops_app(store_url, scripts, keyring) as two,
        httpx.Client(base_url=one, timeout=30.0) as http,
    ):
        for _ in range(CARDS):
            thread = start(http, scripts, ADD, ACK)
            token = issue(keyring, thread, digest_of(http, thread), decider=None, roles=["ops"])
            answers = race([one, two], token)
            taken = [answer for answer in answers if answer.status_code == 200]
            refused = {answer.json()["reason"] for answer in answers if answer.status_code != 200}
            assert len(taken) <= 1, [answer.text for answer in answers]
            assert refused <= {"replayed", "busy"}, refused
            log = stored(store_url, thread)
            decided = [entry.event for entry in log if entry.event.type == "decided"]
            assert len(decided) == len(taken) and all(each.link is not None for each in decided)
            assert not [entry for entry in log if entry.event.type == "action-started"]
            if taken:
                assert taken[0].json()["card"]["approvers"] == [decided[0].by]
            # Afterwards, one at a time, the link is refused to every holder: it was used, or (all refused busy)
            # one of them takes it now and the rest are refused.
            later = [
                http.post("/decide", json={"token": token, "decision": "accept"}, headers={"x-user": who})
                for who in HOLDERS
            ]
            assert sum(answer.status_code == 200 for answer in later) == (0 if taken else 1)
            assert len([entry for entry in stored(store_url, thread) if entry.event.type == "decided"]) == 1
