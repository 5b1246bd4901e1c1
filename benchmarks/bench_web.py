"""Web surface benchmark: prints one JSON line.

The server is ``create_app`` under one uvicorn worker, in a process of its own (this script with ``--serve``), on
the in-process store (``--store sqlite``: a SQLite file in a temporary directory). Its agents stream one inform in
chunks, each chunk naming its stream, its index and the system-wide monotonic clock (``time.monotonic_ns``:
CLOCK_MONOTONIC, one clock for every process of the machine) as the agent yields it. The clients are in this
process: each run on a connection of its own, HTTP/1.1 written and read by hand, its server-sent events read as
they come (httpx costs about as much per event as the server, on the same cores: it delayed what it measured).

- ``latency``: ``--streams`` runs at once (100), each streaming ``--chunks`` chunks (100) about ``--interval``
  seconds apart (0.02: a language model's pace; each gap drawn from 0.5 to 1.5 times it, the first from 0 to 1
  times, so that the streams do not tick together). For every chunk, the time from the agent yielding it to the
  client reading the ``TEXT_MESSAGE_CONTENT`` event that carries it (p50, p95, p99, max; target p99 <= 10 ms),
  and its two parts: ``server_ms`` to the event's body handed to uvicorn, ``wire_ms`` from there to the client's
  read; ``first_chunk_ms``: the first chunk of each run alone (it meets the other runs starting).
  ``cpu_percent`` and ``waiting_for_cpu_percent``: the share of the phase each process ran on a CPU and waited,
  runnable, for one (its threads' schedstat; the second is the machine's other work taking the cores);
  ``server_cpu_us_per_chunk``: the server's CPU time over the chunks it carried. ``--profile FILE``: the server
  runs under cProfile (CPU time) and writes its statistics there; its timings are then not the server's.
- ``held``: ``--held`` runs open at once (1,000) whose agents stream a chunk every ``--hold-interval`` seconds
  until told to finish: the server's resident memory (VmRSS) growth per open run once every run has shown its
  first chunk, its further growth per run while they stream on, and that every run then finishes.
- ``postgresql``: accepted suggestions per second through ``dial-runtime serve --workers 4`` on PostgreSQL (a
  throwaway cluster, tests/pg.py), with the count of lost and duplicated runs checked in the log afterwards.

A lost run or chunk, a ``RUN_ERROR``, a run not finished in time, or a lost or duplicated resume makes the exit
status 1 (after the JSON, which lists them under ``problems``); the timings never do. ``--smoke`` runs a small
version of each, for CI. ``--phase`` runs only the phases it names; ``--tree PATH`` imports ``dial_runtime`` from
the directory ``PATH`` (one holding a copy of the package, such as ``git archive`` writes) in this process and
the server's, to measure one version of the library beside another (the postgresql phase's ``dial-runtime
serve`` imports the installed one); the JSON's ``library`` names the package the server imported.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib.util
import json
import math
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpx

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
if "--tree" in sys.argv:  # before the library is imported, in this process and the server's
    sys.path.insert(1, str(Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()))

from dial_runtime import LogEntry, open_store
from tests.web_server import free_port, server_process

#: A chunk's stamp: ``[L|H stream:index:monotonic_ns]`` (L: a latency run, H: a held run).
STAMP = re.compile(r"\[([LH])(\d+):(\d+):(\d+)\]")
LATENCY_STAMP_BYTES = re.compile(rb"\[L\d+:\d+:\d+\]")
#: The longest a held run's agent streams before it ends by itself (the client gives up long before).
HOLD_LIMIT = 600.0
#: How long a held run may take to show its first chunk, and to finish once released.
HELD_WITHIN = 120.0
#: How long every held run streams on between the two memory readings, in hold intervals.
GROWTH_INTERVALS = 5
#: The benchmark's phases, in the order they run.
PHASES = ("latency", "held", "postgresql")


@dataclass(frozen=True)
class Pace:
    """How the server's agents stream (the server process is given it on its command line)."""

    chunks: int
    interval: float
    hold_interval: float


def stamp(kind: str, stream: int, index: int) -> str:
    return f"[{kind}{stream}:{index}:{time.monotonic_ns()}] "


class Releases:
    """The events that tell a batch of held runs to finish, one per batch, made in the server's event loop."""

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}

    def of(self, batch: str) -> anyio.Event:
        return self._events.setdefault(batch, anyio.Event())


class StampingAgent:
    """Streams one inform of stamped chunks. Thread ``lat-BATCH-N``: ``pace.chunks`` chunks about
    ``pace.interval`` apart; ``hold-BATCH-N``: a chunk every ``pace.hold_interval`` until the batch is released."""

    def __init__(self, conversation_id: str, pace: Pace, releases: Releases) -> None:
        kind, self.batch, number = conversation_id.split("-")
        self.held = kind == "hold"
        self.stream_number = int(number)
        self.pace = pace
        self.releases = releases

    def send(self, message: str) -> str:
        raise AssertionError("the benchmark streams")

    async def stream(self, message: str) -> AsyncIterator[str]:
        yield "<dial><dial-inform>"
        if self.held:
            released = self.releases.of(self.batch)
            until = time.monotonic() + HOLD_LIMIT
            index = 0
            while not released.is_set() and time.monotonic() < until:  # no cancel scope across a yield
                yield stamp("H", self.stream_number, index)
                index += 1
                with anyio.move_on_after(self.pace.hold_interval):
                    await released.wait()
        else:
            interval = self.pace.interval
            await anyio.sleep(random.uniform(0, interval))
            for index in range(self.pace.chunks):
                yield stamp("L", self.stream_number, index)
                await anyio.sleep(interval * random.uniform(0.5, 1.5))
        yield "</dial-inform></dial>"


class Quiet:
    """A domain with nothing to run: the benchmark's replies only inform."""

    actions: ClassVar[dict[str, Any]] = {}

    def run(self, action: str, payload: Any) -> None:
        """Nothing to run."""


def serve(port: int, store: str, pace: Pace, profile: str | None) -> None:
    """The server process: the web surface, and the benchmark's own routes (release a batch of held runs; the
    time each latency chunk's event was handed to uvicorn, recorded by a wrapper around ``send``); under cProfile
    when ``profile`` names the file for its statistics."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import Message, Receive, Scope, Send

    from dial_runtime.web import create_app

    releases = Releases()
    handed: dict[str, int] = {}

    def agent(conversation_id: str, log: Sequence[LogEntry]) -> StampingAgent:
        return StampingAgent(conversation_id, pace, releases)

    web = create_app(store=store, domain=Quiet(), agent=agent, panel=False)

    async def release(request: Request) -> Response:
        releases.of(request.path_params["batch"]).set()
        return Response(status_code=204)

    async def sent(request: Request) -> Response:
        taken = dict(handed)
        handed.clear()
        return JSONResponse(taken)

    async def library(request: Request) -> Response:
        import dial_runtime

        return JSONResponse({"library": str(Path(dial_runtime.__file__).parent)})

    own = Starlette(
        routes=[
            Route("/bench/release/{batch}", release, methods=["POST"]),
            Route("/bench/sent", sent, methods=["GET"]),
            Route("/bench/library", library, methods=["GET"]),
        ]
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        """The benchmark's routes, else the web surface with ``send`` noting the stamps it is handed."""
        if scope["path"].startswith("/bench/"):
            await own(scope, receive, send)
            return

        async def send_recorded(message: Message) -> None:
            if message["type"] == "http.response.body":
                found = LATENCY_STAMP_BYTES.findall(message.get("body", b""))
                if found:
                    now = time.monotonic_ns()
                    for token in found:
                        handed[token.decode()] = now
            await send(message)

        await web(scope, receive, send_recorded)

    options = {"host": "127.0.0.1", "port": port, "log_level": "warning", "ws": "none", "lifespan": "off"}
    if profile is None:
        uvicorn.run(app, backlog=4096, **options)
        return
    signal.signal(signal.SIGTERM, lambda number, frame: None)  # uvicorn raises it again once it has stopped
    profiler = cProfile.Profile(time.process_time)  # CPU time: the machine's other work is not charged
    try:
        profiler.runcall(uvicorn.run, app, backlog=4096, **options)
    finally:
        profiler.dump_stats(profile)


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def body(thread: str, words: str | None = None, resume: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    messages = [] if words is None else [{"id": uuid.uuid4().hex, "role": "user", "content": words}]
    data: dict[str, Any] = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": messages}
    if resume is not None:
        data["resume"] = resume
    return data


@dataclass
class RunRead:
    """What a client read of one run: when each stamp arrived, the event types, what went wrong."""

    thread: str
    arrived: dict[str, int] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def problems(self, chunks: int | None) -> list[str]:
        """What is wrong with the run read: an error event, no ``RUN_FINISHED`` last, a chunk missing (``chunks``:
        how many it must carry, ``None`` for at least one)."""
        found = list(self.errors)
        if not self.kinds or self.kinds[-1] != "RUN_FINISHED":
            found.append(f"{self.thread}: ended with {self.kinds[-1:] or 'no event'}, not RUN_FINISHED")
        indexes = sorted(int(STAMP.fullmatch(token)[3]) for token in self.arrived)  # type: ignore[index]
        expected = "1+" if chunks is None else str(chunks)
        if indexes != list(range(len(indexes))) or (len(indexes) != chunks if chunks is not None else not indexes):
            found.append(f"{self.thread}: chunks {indexes[:5]}...{indexes[-5:]} arrived, {expected} expected")
        return found


class HttpError(Exception):
    """A run's response that is not an event stream."""


async def post_events(url: str, data: dict[str, Any]) -> AsyncIterator[tuple[int, list[bytes]]]:
    """POST ``data`` to ``url``'s ``/agui`` on a connection of its own and yield, as each read completes them, the
    read's time (``time.monotonic_ns``) and the server-sent events' ``data`` fields.

    HTTP/1.1 written and read here (the chunked body decoded as it comes), not by httpx: on the machine's cores
    beside the server, httpx's cost per event (about as much as the server's) delayed every read it measured.
    """
    address = httpx.URL(url)
    payload = json.dumps(data).encode()
    head = (
        f"POST /agui HTTP/1.1\r\nHost: {address.host}:{address.port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    async with await anyio.connect_tcp(address.host, address.port or 80) as connection:
        await connection.send(head.encode() + payload)
        received = b""
        while b"\r\n\r\n" not in received:
            received += await connection.receive()
        headers, _, received = received.partition(b"\r\n\r\n")
        status = headers.split(b" ", 2)[1]
        if status != b"200" or b"transfer-encoding: chunked" not in headers.lower():
            raise HttpError(f"HTTP {status.decode()}")
        now = time.monotonic_ns()
        events = b""
        ended = False
        while True:
            while (size_end := received.find(b"\r\n")) >= 0:  # every whole chunk of the body read so far
                size = int(received[:size_end], 16)
                if size == 0:
                    ended = True
                    break
                end = size_end + 2 + size
                if len(received) < end + 2:
                    break
                events += received[size_end + 2 : end]
                received = received[end + 2 :]
            *blocks, events = events.split(b"\n\n")
            found = [block[len(b"data: ") :] for block in blocks if block.startswith(b"data: ")]
            if found:
                yield now, found
            if ended:
                return
            try:
                piece = await connection.receive()
            except anyio.EndOfStream:
                raise HttpError("the response ended before its last chunk") from None
            now = time.monotonic_ns()
            received += piece


async def read_run(url: str, thread: str, first_chunk: anyio.Event | None = None) -> RunRead:
    """POST a run and read its server-sent events to the end, noting when each stamp (in the text the
    ``TEXT_MESSAGE_CONTENT`` deltas carry) arrived: at the read that completed it. ``first_chunk`` is set when the
    first stamp has."""
    read = RunRead(thread)
    texts: dict[str, str] = {}
    scanned: dict[str, int] = {}
    try:
        async for now, found in post_events(url, body(thread, "go")):
            for data in found:
                event = json.loads(data)
                read.kinds.append(event["type"])
                if event["type"] == "RUN_ERROR":
                    read.errors.append(f"{thread}: RUN_ERROR {event.get('code')}: {event.get('message')}")
                elif event["type"] == "TEXT_MESSAGE_CONTENT":
                    message = event["messageId"]
                    texts[message] = text = texts.get(message, "") + event["delta"]
                    for match in STAMP.finditer(text, scanned.get(message, 0)):
                        read.arrived[match[0]] = now
                        scanned[message] = match.end()
                    if first_chunk is not None and read.arrived:
                        first_chunk.set()
    except HttpError as error:
        read.errors.append(f"{thread}: {error}")
    return read


async def read_runs(
    url: str, threads: Sequence[str], within: float, started: list[anyio.Event] | None = None
) -> tuple[list[RunRead], list[str]]:
    """Read the runs of ``threads`` at once, each within ``within`` seconds; what they read, and what failed.
    ``started[i]`` is set once run ``i`` has shown its first chunk, or has ended."""
    reads: list[RunRead] = []
    failures: list[str] = []

    async def one(position: int) -> None:
        thread = threads[position]
        shown = started[position] if started else None
        with anyio.move_on_after(within) as waited:
            try:
                reads.append(await read_run(url, thread, shown))
            except OSError as error:
                failures.append(f"{thread}: {type(error).__name__}: {error}")
        if waited.cancelled_caught:
            failures.append(f"{thread}: not finished within {within:.0f} s")
        if shown is not None:
            shown.set()

    async with anyio.create_task_group() as group:
        for position in range(len(threads)):
            group.start_soon(one, position)
    return reads, failures


def scheduled_seconds(pid: int) -> tuple[float, float]:
    """The seconds the threads of process ``pid`` have run on a CPU, and waited for one while runnable
    (``/proc/PID/task/*/schedstat``): the second grows when the machine's other work takes the cores."""
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            on_cpu, on_queue, _ = (int(figure) for figure in (task / "schedstat").read_text().split())
            ran, waited = ran + on_cpu, waited + on_queue
    return ran / 1e9, waited / 1e9


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def spread(values: list[float]) -> dict[str, float]:
    """p50, p95, p99 (nearest rank) and max of ``values``, rounded to microseconds."""
    ordered = sorted(values)
    if not ordered:
        return {}
    ranks = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
    found = {name: ordered[max(0, math.ceil(share * len(ordered)) - 1)] for name, share in ranks.items()}
    return {name: round(value, 3) for name, value in {**found, "max": ordered[-1]}.items()}


def load_average() -> list[float]:
    """The machine's load over 1, 5 and 15 minutes (``uptime``'s figures)."""
    return [round(figure, 2) for figure in os.getloadavg()]


def client_limits(connections: int) -> httpx.Limits:
    return httpx.Limits(max_connections=connections + 16, max_keepalive_connections=connections + 16)


async def latency(url: str, pid: int, streams: int, pace: Pace) -> tuple[dict[str, Any], list[str]]:
    """The latency phase, after a few warm-up runs (the first runs of a process import and build lazily)."""
    within = pace.chunks * pace.interval * 5 + 120
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=client_limits(streams)) as client:
        await read_runs(url, [f"lat-warm-{n}" for n in range(min(streams, 5))], within)
        await client.get("/bench/sent")
        processes = {"server": pid, "clients": os.getpid()}
        before = {name: scheduled_seconds(each) for name, each in processes.items()}
        started = time.monotonic()
        reads, problems = await read_runs(url, [f"lat-run-{n}" for n in range(streams)], within)
        elapsed = time.monotonic() - started
        after = {name: scheduled_seconds(each) for name, each in processes.items()}
        handed: dict[str, int] = (await client.get("/bench/sent")).json()
    totals, firsts, server, wire = [], [], [], []
    for read in reads:
        problems += read.problems(pace.chunks)
        for token, arrived in read.arrived.items():
            stamped = STAMP.fullmatch(token)
            assert stamped is not None
            emitted = int(stamped[4])
            totals.append((arrived - emitted) / 1e6)
            if stamped[3] == "0":
                firsts.append(totals[-1])
            if token in handed:
                server.append((handed[token] - emitted) / 1e6)
                wire.append((arrived - handed[token]) / 1e6)
    figures = {
        "streams": streams,
        "chunks_per_stream": pace.chunks,
        "interval_ms": pace.interval * 1000,
        "chunks": len(totals),
        "chunks_per_s": round(len(totals) / elapsed),
        "ms": spread(totals),
        "first_chunk_ms": spread(firsts),
        "server_ms": spread(server),
        "wire_ms": spread(wire),
        "seconds": round(elapsed, 2),
        "cpu_percent": {name: round(100 * (after[name][0] - before[name][0]) / elapsed) for name in processes},
        "waiting_for_cpu_percent": {
            name: round(100 * (after[name][1] - before[name][1]) / elapsed) for name in processes
        },
        "server_cpu_us_per_chunk": round(1e6 * (after["server"][0] - before["server"][0]) / max(1, len(totals))),
        "target_p99_ms": 10,
    }
    return figures, problems


async def held(url: str, pid: int, runs: int, pace: Pace) -> tuple[dict[str, Any], list[str]]:
    """The held phase: memory per open run, after a small warm-up batch opened and released the same way."""
    async with httpx.AsyncClient(base_url=url, timeout=HELD_WITHIN, limits=client_limits(runs)) as client:

        async def batch(name: str, count: int, stream_on: float) -> tuple[list[RunRead], list[str], list[int]]:
            """Open ``count`` held runs, read the RSS once all show a chunk and again ``stream_on`` seconds later,
            release them and read them to their end; the reads, the failures and the RSS before, open, later."""
            before = rss_kb(pid)
            started = [anyio.Event() for _ in range(count)]
            found: list[tuple[list[RunRead], list[str]]] = []
            threads = [f"hold-{name}-{n}" for n in range(count)]
            readings = [before]

            async def read_all() -> None:
                found.append(await read_runs(url, threads, HELD_WITHIN * 2, started))

            async with anyio.create_task_group() as group:
                group.start_soon(read_all)
                with anyio.move_on_after(HELD_WITHIN):
                    for event in started:
                        await event.wait()
                readings.append(rss_kb(pid))
                await anyio.sleep(stream_on)
                readings.append(rss_kb(pid))
                (await client.post(f"/bench/release/{name}")).raise_for_status()
            reads, failures = found[0]
            if not all(event.is_set() for event in started):
                failures.append(f"held runs neither showed a chunk nor ended within {HELD_WITHIN:.0f} s")
            return reads, failures, readings

        await batch("warm", min(runs, 20), 0)
        reads, problems, (before, opened, later) = await batch("run", runs, GROWTH_INTERVALS * pace.hold_interval)
    for read in reads:
        problems += read.problems(None)
    finished = sum(not read.problems(None) for read in reads)
    figures = {
        "runs": runs,
        "hold_interval_s": pace.hold_interval,
        "finished": finished,
        "rss_before_mb": round(before / 1024, 1),
        "rss_open_mb": round(opened / 1024, 1),
        "kb_per_open_run": round((opened - before) / runs, 1),
        "kb_per_run_streaming_on": round((later - opened) / runs, 1),
        "streamed_on_s": GROWTH_INTERVALS * pace.hold_interval,
        "rss_after_mb": round(rss_kb(pid) / 1024, 1),
    }
    return figures, problems


def resumes_per_second(store_url: str, workers: int, conversations: int) -> tuple[dict[str, Any], list[str]]:
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
    figures = {
        "workers": workers,
        "resumes": conversations,
        "resumes_per_s": round(conversations / elapsed, 1),
        "busy_retries": busy,
        "lost": lost,
        "duplicated": duplicated,
    }
    problems = [f"postgresql: {lost} resumes lost, {duplicated} run twice"] if lost or duplicated else []
    return figures, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a small run of each measurement, for CI")
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory", help="the web server's store")
    parser.add_argument("--streams", type=int, help="latency: runs at once (100; smoke: 10)")
    parser.add_argument("--chunks", type=int, help="latency: chunks per run (100; smoke: 20)")
    parser.add_argument("--interval", type=float, default=0.02, help="latency: mean seconds between chunks")
    parser.add_argument("--held", type=int, help="held runs open at once (1000; smoke: 50)")
    parser.add_argument("--hold-interval", type=float, default=1.0, help="seconds between a held run's chunks")
    parser.add_argument("--profile", help="run the server under cProfile, its statistics written to this file")
    parser.add_argument(
        "--phase", action="append", choices=PHASES, help="run only this phase (repeatable; default: all)"
    )
    parser.add_argument("--tree", help="import dial_runtime from this directory (its package's parent)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-store", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    smoke = arguments.smoke
    streams = arguments.streams or (10 if smoke else 100)
    runs = arguments.held or (50 if smoke else 1000)
    pace = Pace(arguments.chunks or (20 if smoke else 100), arguments.interval, arguments.hold_interval)
    raise_fd_limit()
    if arguments.serve:
        serve(arguments.serve, arguments.serve_store, pace, arguments.profile)
        return
    load_before = load_average()
    result: dict[str, Any] = {
        "benchmark": "web",
        "smoke": smoke,
        "store": arguments.store,
        "server": {
            "workers": 1,
            "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
            "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        },
        "cpus": os.cpu_count(),
    }
    phases = arguments.phase or PHASES
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-web-") as folder:
        store = "memory:" if arguments.store == "memory" else f"sqlite:///{folder}/web.db"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, __file__, "--serve", str(port), "--serve-store", store]
        command += ["--chunks", str(pace.chunks), "--interval", str(pace.interval)]
        command += ["--hold-interval", str(pace.hold_interval)]
        if arguments.profile:
            command += ["--profile", str(Path(arguments.profile).resolve())]
        if arguments.tree:
            command += ["--tree", arguments.tree]
        with server_process(command, f"{url}/conversations") as server:
            result["library"] = httpx.get(f"{url}/bench/library").json()["library"]
            if "latency" in phases:
                result["latency"], found = anyio.run(latency, url, server.pid, streams, pace)
                problems += found
            if "held" in phases:
                result["held"], found = anyio.run(held, url, server.pid, runs, pace)
                problems += found
    if "postgresql" in phases:
        from tests.pg import server as postgres

        with postgres() as store_url:
            result["postgresql"], found = resumes_per_second(store_url, *((2, 20) if smoke else (4, 400)))
            problems += found
    result["load_average"] = {"before": load_before, "after": load_average()}
    result["problems"] = problems[:20] + ([f"... {len(problems) - 20} more"] if len(problems) > 20 else [])
    print(json.dumps(result))
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
