"""The MCP door's benchmarks (``dial-runtime mcp``): prints one JSON line.

(o) Overhead: one approved write, as an MCP client sees it. The ``mcp`` SDK's client calls the upstream server's
``write`` tool directly, and the same tool through ``dial-runtime mcp --upstream`` (over stdio, a SQLite store, a
policy person approving in the call), in blocks taken in turn so that the machine's swings weigh on both alike;
each call's arguments are new. Milliseconds per call (p50, p90) for each, and the difference of the medians:
what the door adds to an approved write, besides the person's time; and the CPU time the servers spend per call
in each arm (the gate and its upstream, beside the upstream alone), steadier when the machine's speed swings.

(w) Waiting: ``--sessions`` MCP sessions over streamable HTTP on one server process (PostgreSQL store, a
throwaway cluster as the tests start one), each with a call that waits for a person (a handshake-era client: the
call stays open). The server's resident memory before the calls and once every card waits, per waiting call;
then every card decided in bulk by another store client (16 decisions at a time, as a desk would), and each call
checked to be answered once, with its own outcome, and each action to have run once.

``--smoke`` runs tiny sizes, for CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx
import msgspec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLI = str(Path(sys.executable).parent / "dial-runtime")
TALLY_FILE = "BENCH_MCP_TALLY"

Mark = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


def tally() -> Any:
    """The (w) domain: ``mark`` appends its argument to the file ``BENCH_MCP_TALLY`` names (a write that waits)."""
    from dial_runtime import Domain

    domain = Domain("tally", description="Marks in a file.")
    path = Path(os.environ[TALLY_FILE])

    @domain.action(preview="Mark {text}")
    def mark(text: Mark) -> dict[str, str]:
        """Put a mark in the tally."""
        with path.open("a", encoding="utf-8") as file:
            file.write(text + "\n")
        return {"marked": text}

    return domain


def upstream() -> None:
    """The (o) upstream MCP server, over stdio: ``write`` keeps the text and answers how many it holds."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("bench-upstream")
    kept: list[str] = []

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def write(text: str) -> dict[str, int]:
        """Keep a text."""
        kept.append(text)
        return {"kept": len(kept)}

    server.run("stdio")


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "calls": len(ordered),
    }


@contextlib.asynccontextmanager
async def client_of(command: list[str], errlog: Any) -> AsyncIterator[Any]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parameters = StdioServerParameters(command=command[0], args=command[1:], cwd=HERE, env=dict(os.environ))
    async with Client(stdio_client(parameters, errlog=errlog)) as client:
        yield client


async def timed_calls(client: Any, label: str, count: int, start: int) -> list[float]:
    spent = []
    for number in range(start, start + count):
        began = time.perf_counter()
        result = await client.call_tool("write", {"text": f"{label}-{number}"})
        spent.append((time.perf_counter() - began) * 1000)
        if result.is_error:
            raise RuntimeError(f"{label}: the call failed: {result.content}")
    return spent


def overhead(calls: int, blocks: int, folder: Path) -> dict[str, Any]:
    upstream_command = [sys.executable, str(Path(__file__).resolve()), "--upstream"]
    gated_command = [
        CLI,
        "mcp",
        "--upstream",
        shlex.join(upstream_command),
        "--store",
        f"sqlite:{folder / 'overhead.db'}",
        "--human",
        "dial_runtime.driver.humans:policy_human",
    ]

    async def run() -> tuple[dict[str, list[float]], dict[str, float]]:
        spent: dict[str, list[float]] = {"direct": [], "gated": []}
        cpu = {"direct": 0.0, "gated": 0.0}
        with (folder / "servers.log").open("a", encoding="utf-8") as errlog:
            async with client_of(upstream_command, errlog) as direct, client_of(gated_command, errlog) as gated:
                for client, label in ((direct, "direct"), (gated, "gated")):  # warm up: imports, first writes
                    await timed_calls(client, f"warm-{label}", 5, 0)
                servers = _servers()
                for block in range(blocks):
                    for client, label in ((direct, "direct"), (gated, "gated")):
                        before = _cpu_seconds(servers[label])
                        spent[label] += await timed_calls(client, label, calls // blocks, block * calls)
                        cpu[label] += _cpu_seconds(servers[label]) - before
        return spent, cpu

    spent, cpu = anyio.run(run)
    direct, gated = spread(spent["direct"]), spread(spent["gated"])
    per_call = {label: round(seconds * 1000 / len(spent[label]), 3) for label, seconds in cpu.items()}
    return {
        "direct_ms": direct,
        "gated_ms": gated,
        "added_ms_p50": round(gated["p50"] - direct["p50"], 3),
        # CPU time of the servers per call (the gate with its upstream, beside the upstream alone): steadier
        # than the wall clock on a machine whose speed swings, and what the gate itself costs.
        "server_cpu_ms_per_call": per_call,
        "added_cpu_ms_per_call": round(per_call["gated"] - per_call["direct"], 3),
        "store": "sqlite",
    }


def _servers() -> dict[str, list[int]]:
    """The server processes of each arm: the upstream this process started, and the gate with its upstream."""
    children = _children(os.getpid())
    gate = [pid for pid in children if b"dial-runtime" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return {
        "direct": [pid for pid in children if pid not in gate],
        "gated": [*gate, *(grandchild for pid in gate for grandchild in _children(pid))],
    }


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def _cpu_seconds(pids: list[int]) -> float:
    """The CPU seconds (user and system) the processes ``pids`` have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


@contextlib.contextmanager
def http_server(store: str, port: int, env: dict[str, str], errlog: Any) -> Iterator[subprocess.Popen[bytes]]:
    command = [CLI, "mcp", "--domain", "bench_mcp:tally", "--store", store, "--http", f"127.0.0.1:{port}"]
    command += ["--wait", "3600"]
    process = subprocess.Popen(command, cwd=HERE, env=env, stderr=errlog, stdout=errlog)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=5)
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the MCP server did not start")
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


async def waiting_sessions(url: str, store_url: str, pid: int, sessions: int) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from dial_runtime import Accept, Conversation
    from dial_runtime.agents.outside import OutsideAgent
    from dial_runtime.driver.built import DeferringHuman
    from dial_runtime.stores import open_store
    from dial_runtime.views.person import Card, project

    answers: dict[str, list[Any]] = {}
    connected = anyio.Event()
    opened = 0
    store = open_store(store_url)
    domain = tally()

    async def session(number: int) -> None:
        nonlocal opened
        text = f"mark-{number}"
        async with Client(streamable_http_client(url), mode="legacy") as client:
            opened += 1
            if opened == sessions:
                connected.set()
            result = await client.call_tool("mark", {"text": text})
            answers.setdefault(text, []).append(result)

    async def cards() -> list[tuple[str, str]]:
        found = []
        for conversation in await store.conversations():
            for item in project(await store.read(conversation)).items:
                if isinstance(item, Card) and item.waiting:
                    found.append((conversation, item.id))
        return found

    async def decide(conversation_id: str, suggestion_id: str) -> None:
        conversation = Conversation(
            agent=OutsideAgent(),
            domain=domain,
            human=DeferringHuman(),
            store=store,
            conversation_id=conversation_id,
        )
        await conversation.decide(suggestion_id, Accept(), by="desk", via="cli")

    result: dict[str, Any] = {"sessions": sessions}
    before = rss_kb(pid)
    async with anyio.create_task_group() as group:
        began = time.monotonic()
        for number in range(sessions):
            group.start_soon(session, number)
        with anyio.fail_after(600):
            await connected.wait()
            while len(waiting := await cards()) < sessions:
                await anyio.sleep(0.5)
        result["seconds_until_all_wait"] = round(time.monotonic() - began, 2)
        await anyio.sleep(1)
        held = rss_kb(pid)
        result["server_rss_mb"] = {"before": round(before / 1024, 1), "all_waiting": round(held / 1024, 1)}
        result["kb_per_waiting_call"] = round((held - before) / sessions, 1)
        limit = anyio.Semaphore(16)
        decided_at = time.monotonic()

        async def bounded(conversation_id: str, suggestion_id: str) -> None:
            async with limit:
                await decide(conversation_id, suggestion_id)

        async with anyio.create_task_group() as deciding:
            for conversation_id, suggestion_id in waiting:
                deciding.start_soon(bounded, conversation_id, suggestion_id)
        result["decide_seconds"] = round(time.monotonic() - decided_at, 2)
        with anyio.fail_after(600):
            while sum(len(got) for got in answers.values()) < sessions:
                await anyio.sleep(0.1)
        result["answered_seconds"] = round(time.monotonic() - decided_at, 2)
    await store.aclose()
    wrong = [text for text, got in answers.items() if len(got) != 1 or got[0].is_error]
    wrong += [text for text, got in answers.items() if got and got[0].structured_content != {"marked": text}]
    result["answered_once"] = sum(1 for got in answers.values() if len(got) == 1)
    result["wrong"] = sorted(set(wrong))[:10]
    return result


def waiting(sessions: int, folder: Path) -> dict[str, Any]:
    sys.path.insert(1, str(ROOT))
    from tests.pg import server as postgres

    tally_file = folder / "tally.txt"
    env = {**os.environ, TALLY_FILE: str(tally_file)}
    os.environ[TALLY_FILE] = str(tally_file)
    port = free_port()
    with (
        postgres() as store_url,
        (folder / "http.log").open("a", encoding="utf-8") as errlog,
        http_server(store_url, port, env, errlog) as server,
    ):
        result = anyio.run(waiting_sessions, f"http://127.0.0.1:{port}/mcp", store_url, server.pid, sessions)
    marks = tally_file.read_text(encoding="utf-8").splitlines() if tally_file.exists() else []
    result["runs"] = len(marks)
    result["ran_twice"] = len(marks) - len(set(marks))
    result["store"] = "postgresql"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--calls", type=int, help="(o) calls per arm (400; smoke: 20)")
    parser.add_argument("--sessions", type=int, help="(w) sessions with a waiting call (1000; smoke: 20)")
    parser.add_argument("--phase", action="append", choices=["overhead", "waiting"], help="one phase (repeatable)")
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.upstream:
        upstream()
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    smoke = arguments.smoke
    calls = arguments.calls or (20 if smoke else 400)
    sessions = arguments.sessions or (20 if smoke else 1000)
    phases = arguments.phase or ["overhead", "waiting"]
    result: dict[str, Any] = {"benchmark": "mcp", "smoke": smoke, "cpus": os.cpu_count()}
    problems = []
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as name:
        folder = Path(name)
        if "overhead" in phases:
            result["overhead"] = overhead(calls, 2 if smoke else 8, folder)
        if "waiting" in phases:
            result["waiting"] = found = waiting(sessions, folder)
            if found["answered_once"] != sessions or found["wrong"] or found["runs"] != sessions:
                problems.append("waiting: a call was not answered once with its own outcome, or ran not once")
    result["problems"] = problems
    print(json.dumps(result))
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
