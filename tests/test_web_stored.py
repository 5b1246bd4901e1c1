"""The web surface shows nothing the store does not have: a real uvicorn server, a streaming agent, two clients
running conversations at once, on SQLite and on PostgreSQL; every card a run showed is in the store, at or before
the seq the run reported, and accepting it is never refused for an interrupt the store never got."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from dial_runtime import LogEntry, open_store, replay
from dial_runtime.web import create_app

from .fakes import StreamingAgent, envelope, suggest
from .web_domains import WebNotes
from .web_server import accept, interrupts, run, run_input, serving

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
