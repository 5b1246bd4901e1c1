"""The web surface shows agent text as it arrives: ``TEXT_MESSAGE_CONTENT`` events leave the server while the
agent's reply is still streaming, and each message opens, fills and closes once."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import httpx
import pytest

from dial_runtime import LogEntry
from dial_runtime.web import create_app

from ..fakes import suggest
from ..web_domains import WebNotes
from ..web_server import decode, run_input, serving

pytestmark = pytest.mark.anyio

FIRST, REST = "Let me look at your ", "notes first."
REPLY_REST = f"{REST}</dial-inform>" + suggest("add-note", '{"text":"milk"}') + "</dial>"
SEEN_WITHIN = 5.0


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The client on trio and on asyncio, real clocks (the server is real)."""
    return request.param  # type: ignore[no-any-return]


class HoldingAgent:
    """Streams the start of an inform, then holds the rest until the client has seen that start arrive (a thread
    event: uvicorn runs in another thread), then streams the rest in small chunks."""

    def __init__(self, seen: threading.Event) -> None:
        self.seen = seen
        self.held_until_seen = False

    async def send(self, message: str) -> str:
        raise AssertionError("the web surface streams")

    async def stream(self, message: str) -> AsyncIterator[str]:
        yield "Sure. <dial><dial-inform>"
        yield FIRST
        deadline = time.monotonic() + SEEN_WITHIN
        while not self.seen.is_set() and time.monotonic() < deadline:
            await anyio.sleep(0.005)
        self.held_until_seen = self.seen.is_set()
        for start in range(0, len(REPLY_REST), 5):
            yield REPLY_REST[start : start + 5]


async def test_text_content_arrives_before_the_reply_ends_and_each_message_once(tmp_path: Any) -> None:
    seen = threading.Event()
    agents: list[HoldingAgent] = []

    def agent(conversation_id: str, log: Sequence[LogEntry]) -> HoldingAgent:
        agents.append(HoldingAgent(seen))
        return agents[-1]

    app = create_app(store=f"sqlite:{tmp_path / 'web.db'}", domain=WebNotes(), agent=agent)
    events: list[dict[str, Any]] = []
    with serving(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
            body = run_input("live", words="add milk")
            async with client.stream("POST", "/agui", json=body) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    events += decode(line)
                    last = events[-1] if events else {}
                    if last.get("type") == "TEXT_MESSAGE_CONTENT" and FIRST.strip() in last["delta"]:
                        seen.set()
    assert agents[0].held_until_seen, "no TEXT_MESSAGE_CONTENT reached the client while the reply was held"
    texts: dict[str, list[str]] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            assert event["messageId"] not in texts, "a message was opened twice"
            texts[event["messageId"]] = []
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            texts[event["messageId"]].append(event["delta"])
    assert ["".join(parts) for parts in texts.values()] == ["Sure.", FIRST + REST]
    assert len(texts[list(texts)[1]]) > 1  # chunk by chunk, not once complete
    kinds = [event["type"] for event in events]
    assert kinds.count("TEXT_MESSAGE_END") == 2
    assert kinds.index("TOOL_CALL_START") > max(i for i, kind in enumerate(kinds) if kind == "TEXT_MESSAGE_END")
