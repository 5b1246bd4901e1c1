"""The web surface shows nothing the store does not have: a real uvicorn server, a streaming agent, two clients
running conversations at once, on SQLite and on PostgreSQL; every card a run showed is in the store, at or before
the seq the run reported, and accepting it is never refused for an interrupt the store never got. A resume's
decisions are taken whole, with another worker waiting for the conversation."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from dial_runtime import LogEntry, open_store, replay
from dial_runtime.web import create_app, scripted_agents

from ..fakes import StreamingAgent, envelope, suggest
from ..web_domains import WebNotes
from ..web_server import accept, interrupts, run, run_input, serving

pytestmark = pytest.mark.anyio

#: Conversations per store, shared by the two clients.
CONVERSATIONS = 400
CLIENTS = 2

REPLY = envelope(
    "<dial-inform>One moment.</dial-inform>",
    suggest("add-note", '{"text":"buy milk"}', text="Add buy milk"),
    prose="Here you go.",
)
THANKS = '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>'


@pytest.fixture
def anyio_backend() -> str:
    """The clients run on asyncio, as uvicorn does."""
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'web.db'}"
    return request.getfixturevalue("pg_schema_url")  # type: ignore[no-any-return]


def streaming(conversation_id: str, log: Sequence[LogEntry]) -> AsyncIterator[str] | Any:
    """Each run's agent streams in small chunks, taken up after the replies the log holds."""
    replies = [REPLY, THANKS][sum(1 for entry in log if entry.event.type == "reply") :]
    return StreamingAgent(replies, size=4)


async def test_every_card_a_run_showed_is_in_the_store(store_url: str) -> None:
    served, store = open_store(store_url), open_store(store_url)
    app = create_app(store=served, domain=WebNotes(), agent=streaming)
    lost: list[str] = []
    with serving(app) as base_url:

        async def client(first: int) -> None:
            async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
                for number in range(first, CONVERSATIONS, CLIENTS):
                    thread = f"load-{number}"
                    events = await run(http, run_input(thread, words="add milk"))
                    (shown,) = interrupts(events)
                    held = await store.read(thread)
                    if len(held) < events[-1]["metadata"]["seq"]:
                        lost.append(
                            f"{thread}: shown up to seq {events[-1]['metadata']['seq']}, stored {len(held)}"
                        )
                    decided = await run(http, run_input(thread, resume=[accept(shown)]))
                    if decided[-1]["type"] != "RUN_FINISHED":
                        lost.append(f"{thread}: {decided[-1]}")

        with anyio.fail_after(600):
            async with anyio.create_task_group() as group:
                for first in range(CLIENTS):
                    group.start_soon(client, first)
    try:
        assert not lost, f"{len(lost)} of {CONVERSATIONS} lost, first: {lost[0]}"
        for number in range(CONVERSATIONS):
            log = await store.read(f"load-{number}")
            kinds = [entry.event.type for entry in log]
            assert kinds.count("suggestion") == 1 and kinds.count("action-started") == 1, (number, kinds)
            if number % 40 == 0:  # a web conversation's untouched log replays identical, message ids and all
                report = replay(log, conversation_id=f"load-{number}")
                assert report.ok, str(report)
    finally:
        await store.aclose()
        await served.aclose()


class GatedNotes(WebNotes):
    """Notes whose first run waits for the test to let it go (it runs in the server's thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.running, self.go = threading.Event(), threading.Event()

    async def run(self, action: str, payload: Any) -> Any:
        if not self.running.is_set():
            self.running.set()
            await anyio.to_thread.run_sync(self.go.wait, 30)
        return super().run(action, payload)


async def read_log(url: str, conversation_id: str) -> list[LogEntry]:
    store = open_store(url)
    try:
        return await store.read(conversation_id)
    finally:
        await store.aclose()


def lock_waiters(url: str) -> int:
    """How many sessions wait for an advisory lock on the server."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
        return int(row[0]) if row else 0


async def test_a_resume_deciding_two_cards_lets_no_other_worker_in_between(pg_schema_url: str) -> None:
    """A resume's decisions are taken under one hold of the conversation, from their check to the last: another
    worker queued for the conversation's lock while the first decision runs gets it once the resume has ended,
    not between the two decisions (where it would have taken the second card from under the resume)."""
    domain, thread = GatedNotes(), "whole"
    served = open_store(pg_schema_url)
    two = envelope(suggest("add-note", '{"text":"a"}'), suggest("add-note", '{"text":"b"}'))
    app = create_app(store=served, domain=domain, agent=scripted_agents([two, THANKS]))
    outcomes_when_granted: list[int] = []

    def other_worker() -> None:
        """Wait for the conversation's lock as a worker does, note how many outcomes the log holds once it is
        granted, and keep it a moment (a resume that let it in between would find the conversation busy)."""
        with psycopg.connect(pg_schema_url, autocommit=True) as connection:
            connection.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (thread,))
            log = anyio.run(read_log, pg_schema_url, thread)
            outcomes_when_granted.append(sum(entry.event.type == "outcome" for entry in log))
            time.sleep(0.5)
            connection.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (thread,))

    try:
        with serving(app) as base_url:
            async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
                shown = interrupts(await run(http, run_input(thread, words="two notes")))
                assert len(shown) == 2
                resumed: list[list[dict[str, Any]]] = []

                async def resume() -> None:
                    resumed.append(await run(http, run_input(thread, resume=[accept(each) for each in shown])))

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as group:
                        group.start_soon(resume)
                        await anyio.to_thread.run_sync(domain.running.wait, 30)
                        group.start_soon(anyio.to_thread.run_sync, other_worker)
                        while lock_waiters(pg_schema_url) == 0:  # the other worker is queued for the lock
                            await anyio.sleep(0.02)
                        domain.go.set()
        assert resumed[0][-1]["type"] == "RUN_FINISHED", resumed[0][-1]
        assert outcomes_when_granted == [2]
        log = await served.read(thread)
        assert [entry.event.status for entry in log if entry.event.type == "outcome"] == ["done", "done"]
        assert domain.notes == ["a", "b"]
    finally:
        await served.aclose()
