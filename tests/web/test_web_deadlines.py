"""Deadlines on the web surface: ``create_app(decide_timeout=...)`` gives every card a deadline on the log; a
server that runs its lifespan fires it with nobody watching (here SQLite: the in-process timer), and an accept
that arrives after it is refused ``already-decided`` and runs nothing, whether the timer fired or the run's own
open found it due. A real uvicorn server, a real SQLite file, real time.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from dial_runtime import LogEntry
from dial_runtime.runtime.events import OutcomeEvent, SuggestionEvent
from dial_runtime.web import create_app

from ..fakes import Agent, envelope, suggest
from ..web_domains import WebNotes
from ..web_server import accept, decode, interrupts, run_input, serving, stored_log

pytestmark = pytest.mark.anyio

PROPOSE = envelope(suggest("add-note", '{"text":"buy milk"}', text="Add buy milk"))
THANKS = envelope("<dial-acknowledge>ok</dial-acknowledge>")


@pytest.fixture
def anyio_backend() -> str:
    """The client runs on asyncio, as uvicorn does."""
    return "asyncio"


def agent(conversation_id: str, log: Any) -> Agent:
    replies = [PROPOSE, THANKS, THANKS][sum(1 for entry in log if entry.event.type == "reply") :]
    return Agent(replies)


async def stored(db: Path) -> list[LogEntry]:
    """The conversation's log as the SQLite file holds it (read in a thread: it runs an event loop of its own)."""
    return await anyio.to_thread.run_sync(stored_log, db, "t-1")


def outcomes(log: list[LogEntry]) -> list[tuple[str, str, bool]]:
    return [(e.event.id, e.event.status, e.event.expired) for e in log if isinstance(e.event, OutcomeEvent)]


async def first_run(client: httpx.AsyncClient, thread: str) -> dict[str, Any]:
    response = await client.post("/agui", json=run_input(thread, words="add milk"))
    assert response.status_code == 200, response.text
    (card,) = interrupts(decode(response.text))
    return card


@pytest.mark.parametrize("lifespan", ["on", "off"], ids=["fired by the server", "found due by the next run"])
async def test_a_deadline_expires_a_card_and_a_late_accept_is_refused(tmp_path: Path, lifespan: str) -> None:
    db = tmp_path / "web.db"
    domain = WebNotes()
    app = create_app(store=f"sqlite:{db}", domain=domain, agent=agent, decide_timeout=0.5)
    with serving(app, lifespan=lifespan) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            card = await first_run(client, "t-1")
            shown = next(e for e in await stored(db) if isinstance(e.event, SuggestionEvent))
            assert isinstance(shown.event, SuggestionEvent) and shown.event.deadline == shown.time + 0.5
            # The interrupt says when it expires, as AG-UI's interrupt pattern reads it: ISO 8601, in UTC.
            expires = datetime.datetime.fromisoformat(card["expiresAt"].replace("Z", "+00:00"))
            assert abs(expires.timestamp() - shown.event.deadline) < 0.001
            if lifespan == "on":  # nobody asks anything: the server's timer fires it
                with anyio.fail_after(5):
                    while not outcomes(await stored(db)):
                        await anyio.sleep(0.05)
                fired = next(e.time for e in await stored(db) if isinstance(e.event, OutcomeEvent))
                assert 0 <= fired - (shown.time + 0.5) < 1.0
            else:
                await anyio.sleep(max(0.0, shown.time + 0.6 - time.time()))
            response = await client.post("/agui", json=run_input("t-1", resume=[accept(card)]))
            assert response.status_code == 200, response.text
            refusals = [
                event.get("value", event).get("code")
                for event in decode(response.text)
                if event["type"] in ("CUSTOM", "RUN_ERROR")
            ]
            assert "already-decided" in refusals, response.text
    assert outcomes(await stored(db)) == [("sg-1", "dismissed", True)]
    assert domain.notes == []  # nothing ran
