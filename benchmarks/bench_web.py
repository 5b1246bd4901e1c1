"""Web surface benchmark: prints one JSON line.

- ``latency_ms``: from a reply chunk leaving the agent to its ``TEXT_MESSAGE_CONTENT`` reaching the client (p50,
  p99; target p99 <= 10 ms). The server runs in its own process; the agent streams informs 5 ms apart, each chunk
  stamped with the system-wide monotonic clock, which the client reads on arrival.
- ``kb_per_open_stream``: the server process's resident memory, per open run, with N conversations streaming at
  once (each agent has sent its first chunk and waits).
- ``resumes_per_s``: accepted suggestions per second through ``dial-runtime serve --workers 4`` on PostgreSQL (a
  throwaway cluster, tests/pg.py), with the count of lost and duplicated runs checked in the log afterwards.

``--smoke`` runs a small version of each, for CI.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpx

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from dial_runtime import LogEntry, open_store
from tests.web_server import free_port, server_process

INFORMS, INTERVAL = 40, 0.005


class StampingAgent:
    """Streams informs, each stamped with ``time.monotonic_ns()`` as it leaves; ``hold`` conversations stop after
    the first chunk and wait (a stream kept open)."""

    def __init__(self, conversation_id: str) -> None:
        self.hold = conversation_id.startswith("hold")

    def send(self, message: str) -> str:
        raise AssertionError("the benchmark streams")

    async def stream(self, message: str) -> AsyncIterator[str]:
        yield "<dial>"
        for _ in range(1 if self.hold else INFORMS):
            yield f"<dial-inform>{time.monotonic_ns()}</dial-inform>"
            await anyio.sleep(INTERVAL)
        if self.hold:
            await anyio.sleep(600)
        yield "</dial>"


class Quiet:
    """A domain with nothing to run: the benchmark's replies only inform."""

    actions: ClassVar[dict[str, Any]] = {}

    def run(self, action: str, payload: Any) -> None:
        """Nothing to run."""


def serve_stamping(port: int) -> None:
    """The server process of the latency and memory measurements."""
    import uvicorn

    from dial_runtime.web import create_app

    def agent(conversation_id: str, log: Sequence[LogEntry]) -> StampingAgent:
        return StampingAgent(conversation_id)

    app = create_app(store="memory:", domain=Quiet(), agent=agent, timeout=None)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan="off", backlog=4096)


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def body(thread: str, words: str | None = None, resume: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    messages = [] if words is None else [{"id": uuid.uuid4().hex, "role": "user", "content": words}]
    data: dict[str, Any] = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages}
    if resume is not None:
        data["resume"] = resume
    return data


async def latencies(url: str, runs: int) -> list[float]:
    found: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for run in range(runs):
            async with client.stream("POST", "/agui", json=body(f"lat-{run}", "go")) as response:
                async for line in response.aiter_lines():
                    now = time.monotonic_ns()
                    if line.startswith("data: ") and '"TEXT_MESSAGE_CONTENT"' in line:
                        found.append((now - int(json.loads(line[6:])["delta"])) / 1e6)
    return found


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def memory_per_stream(url: str, pid: int, streams: int) -> float:
    before = rss_kb(pid)
    opened = anyio.Event()
    count = 0
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def hold(n: int) -> None:
            nonlocal count
            async with client.stream("POST", "/agui", json=body(f"hold-{n}", "go")) as response:
                async for line in response.aiter_lines():
                    if '"TEXT_MESSAGE_CONTENT"' in line:
                        count += 1
                        if count == streams:
                            opened.set()
                        await anyio.sleep_forever()

        async with anyio.create_task_group() as group:
            for n in range(streams):
                group.start_soon(hold, n)
            with anyio.fail_after(120):
                await opened.wait()
            after = rss_kb(pid)
            group.cancel_scope.cancel()
    return (after - before) / streams


def resumes_per_second(store_url: str, workers: int, conversations: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-web-"))
    script = folder / "replies.json"
    script.write_text(
        json.dumps(
            [
                '<dial><dial-suggest action="add-note"><dial-payload>{"text":"milk"}</dial-payload>'
                "</dial-suggest></dial>",
                '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>',
            ]
        )
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "dial_runtime.cli", "serve", "--agent", f"script:{script}"]
    command += ["--domain", "dial_runtime.demo:NotesDomain", "--store", store_url, "--port", str(port)]
    command += ["--workers", str(workers)]
    names = [f"r-{uuid.uuid4().hex[:8]}-{n}" for n in range(conversations)]
    with server_process(command, f"{url}/conversations"):

        async def drive() -> tuple[float, int]:
            limits = httpx.Limits(max_connections=32)
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
                waiting: dict[str, str] = {}
                for name in names:
                    text = (await client.post("/agui", json=body(name, "add milk"))).text
                    last = json.loads(text.strip().splitlines()[-1][6:])
                    waiting[name] = last["outcome"]["interrupts"][0]["id"]
                busy = 0
                limiter = anyio.Semaphore(16)

                async def resume(name: str) -> None:
                    nonlocal busy
                    entry = {"interruptId": waiting[name], "status": "resolved", "payload": {"approved": True}}
                    async with limiter:
                        while True:
                            text = (await client.post("/agui", json=body(name, resume=[entry]))).text
                            if '"code":"busy"' not in text:
                                return
                            busy += 1

                started = time.perf_counter()
                async with anyio.create_task_group() as group:
                    for name in names:
                        group.start_soon(resume, name)
                return time.perf_counter() - started, busy

        elapsed, busy = anyio.run(drive)

    async def check() -> tuple[int, int]:
        store = open_store(store_url)
        lost = duplicated = 0
        try:
            for name in names:
                runs = [e for e in await store.read(name) if e.event.type == "action-started"]
                lost += not runs
                duplicated += max(0, len(runs) - 1)
        finally:
            await store.aclose()
        return lost, duplicated

    lost, duplicated = anyio.run(check)
    return {
        "workers": workers,
        "resumes": conversations,
        "resumes_per_s": round(conversations / elapsed, 1),
        "busy_retries": busy,
        "lost": lost,
        "duplicated": duplicated,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a small run of each measurement, for CI")
    parser.add_argument("--serve-stamping", type=int, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    raise_fd_limit()
    if arguments.serve_stamping:
        serve_stamping(arguments.serve_stamping)
        return
    runs, streams, workers, conversations = (2, 50, 2, 20) if arguments.smoke else (10, 1000, 4, 400)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, __file__, "--serve-stamping", str(port)]
    with server_process(command, f"{url}/conversations") as server:
        found = anyio.run(latencies, url, runs)
        kb = anyio.run(memory_per_stream, url, server.pid, streams)
    found.sort()
    result: dict[str, Any] = {
        "benchmark": "web",
        "smoke": arguments.smoke,
        "latency_ms": {
            "chunks": len(found),
            "p50": round(statistics.median(found), 3),
            "p99": round(found[min(len(found) - 1, int(len(found) * 0.99))], 3),
        },
        "open_streams": streams,
        "kb_per_open_stream": round(kb, 1),
    }
    from tests.pg import server as postgres

    with postgres() as store_url:
        result["postgresql"] = resumes_per_second(store_url, workers, conversations)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
