"""A real uvicorn server for the web tests, in a thread of the test process, and an AG-UI client for it.

uvicorn runs on asyncio (its own loop, in its own thread); the tests' clients (httpx) run on trio and asyncio.
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

from dial_runtime import LogEntry, open_store

from .fakes import stop

START_TIMEOUT = 10.0


@contextlib.contextmanager
def serving(app: Any, port: int = 0, *, lifespan: str = "off") -> Iterator[str]:
    """The base URL of ``app`` served by uvicorn on 127.0.0.1 for the block's length, on ``port`` (a free one
    when 0; a given one can be served again by the next server, as a restart does); ``lifespan="on"`` runs the
    application's lifespan (its deadline scheduler)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, lifespan=lifespan, ws="none", log_level="warning", timeout_graceful_shutdown=2)
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


def stored_log(store: Path, conversation: str) -> list[LogEntry]:
    """The conversation's log as the SQLite file ``store`` holds it, read through a store of its own."""

    async def read() -> list[LogEntry]:
        opened = open_store(f"sqlite:{store}")
        try:
            return list(await opened.read(conversation))
        finally:
            await opened.aclose()

    return anyio.run(read)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server_process(
    command: Sequence[str], ready_url: str, *, timeout: float = 60.0
) -> Iterator[subprocess.Popen[bytes]]:
    """A server started with ``command``, once ``ready_url`` answers (``timeout`` seconds at most: a process of
    several workers imports the library in each); terminated (then killed) after the block. Its output goes to a
    file, shown when it does not start."""
    with tempfile.TemporaryFile() as output:
        child = subprocess.Popen(list(command), stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    httpx.get(ready_url, timeout=1)
                    break
                except httpx.TransportError:
                    if child.poll() is not None or time.monotonic() > deadline:
                        child.kill()
                        child.wait(timeout=10)
                        output.seek(0)
                        raise RuntimeError(f"{command[0]} did not start: {output.read().decode()}") from None
                    time.sleep(0.05)
            yield child
        finally:
            stop(child, grace=20)


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


class ChangeStream:
    """The ``changed`` events of a change stream (``GET /conversations/{id}/changes``, ``GET /inbox/changes``),
    read as they come (each read bounded by the client's timeout). Synchronous: httpx's async streams, left before
    their end, are not closed on trio."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def next_seq(self) -> int:
        """The seq the next ``changed`` event names (comments skipped)."""
        return int(self.next_data()["seq"])

    def next_data(self) -> dict[str, Any]:
        """The data of the next event (comments skipped)."""
        while True:
            block, found, rest = self._buffer.partition(b"\n\n")
            if found:
                self._buffer = rest
                for line in block.decode().splitlines():
                    if line.startswith("data: "):
                        return dict(json.loads(line[len("data: ") :]))
                continue
            chunk = next(self._chunks, None)
            if chunk is None:
                raise AssertionError("the change stream ended")
            self._buffer += chunk

    def until(self, seq: int) -> int:
        """Read on until an event names ``seq`` or more (a run writes its log in several appends); that seq."""
        seen = self.next_seq()
        while seen < seq:
            seen = self.next_seq()
        return seen


@contextlib.contextmanager
def changes(base_url: str, thread: str, *, timeout: float = 5.0) -> Iterator[ChangeStream]:
    """The change stream of conversation ``thread`` on the server at ``base_url``, open for the block's length."""
    with (
        httpx.Client(base_url=base_url, timeout=timeout) as client,
        client.stream("GET", f"/conversations/{thread}/changes") as response,
    ):
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield ChangeStream(response.iter_raw())
