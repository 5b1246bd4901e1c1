"""A real uvicorn server for the web tests, in a thread of the test process, and an AG-UI client for it.

uvicorn runs on asyncio (its own loop, in its own thread); the tests' clients (httpx) run on trio and asyncio.
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn

START_TIMEOUT = 10.0


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """The base URL of ``app`` served by uvicorn on 127.0.0.1 (a free port) for the block's length."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", ws="none", log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT)
        listener.close()


def run_input(
    thread: str, *, words: str | None = None, resume: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An AG-UI ``RunAgentInput`` (wire form): the person's new words as the last message, resume entries."""
    messages = [] if words is None else [{"id": uuid.uuid4().hex, "role": "user", "content": words}]
    body: dict[str, Any] = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages}
    if resume is not None:
        body["resume"] = resume
    return body


def decode(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body (``data:`` lines)."""
    return [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]


async def run(client: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> list[dict[str, Any]]:
    """POST one run and return its decoded events (the stream read to its end)."""
    response = await client.post("/agui", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return decode(response.text)


def finished(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's last event, which must be RUN_FINISHED."""
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events[-1]


def interrupts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The interrupts a run ended with ([] when it succeeded)."""
    outcome = finished(events)["outcome"]
    return list(outcome.get("interrupts", [])) if outcome["type"] == "interrupt" else []


def accept(interrupt: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The resume entry that accepts a suggestion's interrupt as shown."""
    payload = {"approved": True, "digest": interrupt["metadata"]["digest"], **extra}
    return {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}
