"""Store benchmarks: prints one JSON line.

(o) The runtime's scenario (a) (``bench_runtime.py``: conversations of one two-turn ``say``) on each store: the
time per turn of a stored conversation minus the time per turn of one without a store, in milliseconds, for the
in-process, SQLite and PostgreSQL stores; and the time ``Conversation.open`` takes on each. PostgreSQL is measured
with ``synchronous_commit`` on (a commit waits for its WAL flush: the server's default) and off (a commit survives
the client's and the server's crash, not the machine's: SQLite's ``synchronous=NORMAL`` trade).

(w) 200 conversations driven by 4 worker processes against PostgreSQL (``synchronous_commit`` on): each worker
drives its share concurrently (anyio task group, at most ``--concurrency`` at a time: each conversation being
driven holds a server connection for its lock), every conversation 2 or 3 ``say`` calls, each on a conversation
object opened for it, as a worker serving requests would. Afterwards every log is read and folded: seqs 1..N, one
``said`` per call, one suggestion per call, each with exactly one outcome, ``done``, nothing owed, nothing open.

(d) Defer-then-decide: conversations each opened, given one ``say`` whose suggestion the person defers, then
``decide(..., Accept())``, in microseconds per agent turn, on the in-process store and on SQLite, and on the SQLite
store of a base commit (``--base``, by default the last one whose store kept marks in its lock files), each pass
of the three taken in turn so that the machine's swings weigh on all alike; and the ratios SQLite over memory.

The PostgreSQL server is the one ``DIAL_TEST_POSTGRES_URL`` names, else a throwaway cluster started like the
tests' (``tests/pg.py``) but syncing to disk; a fresh schema holds the benchmark's table and is dropped at the end.
``--smoke`` runs tiny sizes, for CI.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import anyio
import anyio.to_thread
import psycopg
import trio
from bench_runtime import ACKNOWLEDGE_REPLY, SUGGESTION_REPLY, Alternating, Notes

from dial_runtime import Accept, Conversation, policy_human, scripted_human
from dial_runtime.runtime.state import ConversationState
from dial_runtime.stores import SQLiteStore, StorePort, open_store

WORDS = "add a note: buy milk"
REPLIES = [SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]
CHECKOUT = Path(__file__).resolve().parents[1]

#: The last commit whose SQLite store kept marks in its lock files: scenario (d)'s default base.
MARKS_STORE = "1c12dd51d37a8b62637b6b48db317d67281caa58"


def _options(url: str, **settings: str) -> str:
    """``url`` with server settings for its sessions (libpq's ``options``)."""
    value = " ".join(f"-c{name}={setting}" for name, setting in settings.items())
    return f"{url}{'&' if '?' in url else '?'}options={quote(value)}"


@contextmanager
def postgres() -> Iterator[Callable[[str], str]]:
    """For the block's length: the URL of a fresh schema of a PostgreSQL server, by ``synchronous_commit``."""
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
    from tests.pg import server

    with server(fsync=True) as url:
        schema = f"bench_{uuid.uuid4().hex}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"CREATE SCHEMA {schema}")
        try:
            yield lambda synchronous_commit: _options(
                url, search_path=schema, synchronous_commit=synchronous_commit
            )
        finally:
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute(f"DROP SCHEMA {schema} CASCADE")


def make() -> Conversation:
    """A scenario (a) conversation without a store."""
    return Conversation(**parts(Alternating(REPLIES)))


async def say(conversation: Conversation) -> None:
    result = await conversation.say(WORDS)
    assert result.turns == 2 and result.outcomes[0].status == "done", result


def scenario(url: str | None, count: int) -> tuple[float, float]:
    """Seconds per ``Conversation.open`` and per turn of scenario (a), on the store ``url`` names (or none)."""

    async def work() -> tuple[float, float]:
        store = None if url is None else open_store(url)
        try:
            if store is None:
                conversations = [make() for _ in range(count)]
                opened = 0.0
            else:
                await store.conversations()  # connect before the clock starts
                prefix = uuid.uuid4().hex[:8]
                began = time.perf_counter()
                conversations = [
                    await Conversation.open(store, f"{prefix}-{n}", **parts(Alternating(REPLIES)))
                    for n in range(count)
                ]
                opened = (time.perf_counter() - began) / count
            began = time.perf_counter()
            for each in conversations:
                await say(each)
            return opened, (time.perf_counter() - began) / (2 * count)
        finally:
            if store is not None:
                await store.aclose()

    return trio.run(work)


def overheads(pg_url: Callable[[str], str], count: int, rounds: int) -> dict[str, float]:
    """Milliseconds per turn each store adds to scenario (a), and milliseconds per open: the best of ``rounds``,
    taken in turns so that other load on the machine weighs on every store alike."""
    scenario(None, 10)  # warm up
    with tempfile.TemporaryDirectory(prefix="dial-bench-") as folder:
        urls = {
            "none": None,
            "memory": "memory:",
            "sqlite": f"sqlite:{Path(folder) / 'logs.db'}",
            "postgres": pg_url("on"),
            "postgres_async_commit": pg_url("off"),
        }
        best = {name: (float("inf"), float("inf")) for name in urls}
        for _ in range(rounds):
            for name, url in urls.items():
                opened, per_turn = scenario(url, count)
                best[name] = (min(best[name][0], opened), min(best[name][1], per_turn))
    bare = best.pop("none")[1]
    results = {"none_ms_per_turn": round(bare * 1e3, 4)}
    for name, (opened, per_turn) in best.items():
        results[f"{name}_overhead_ms_per_turn"] = round((per_turn - bare) * 1e3, 3)
        results[f"{name}_open_ms"] = round(opened * 1e3, 3)
    return results


def base_sqlite(revision: str, folder: Path) -> ModuleType:
    """The SQLite store module of ``revision``, imported as a module of this checkout's ``dial_runtime.stores``
    (it shares the package's other modules); ``RuntimeError`` when git cannot show it."""
    shown = subprocess.run(
        ["git", "-C", str(CHECKOUT), "show", f"{revision}:dial_runtime/stores/sqlite.py"],
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        raise RuntimeError(f"git show {revision}: {shown.stderr.strip()}")
    source = folder / "base_sqlite.py"
    source.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location("dial_runtime.stores.base_sqlite", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def defer_then_decide(store: StorePort, conversation_id: str) -> int:
    """One conversation of scenario (d); returns its agent turns."""
    agent = Alternating(REPLIES)
    conversation = await Conversation.open(
        store, conversation_id, agent=agent, domain=Notes(), human=scripted_human(["defer"])
    )
    deferred = await conversation.say(WORDS)
    assert deferred.status == "awaiting", deferred
    decided = await conversation.decide("sg-1", Accept())
    assert decided.outcomes[0].status == "done", decided
    return agent.turn


def deferred_pass(opened: Callable[[], StorePort], count: int) -> float:
    """Seconds per agent turn over ``count`` scenario (d) conversations on a fresh store."""

    async def work() -> float:
        store = opened()
        try:
            await store.conversations()  # connect before the clock starts
            began = time.perf_counter()
            turns = 0
            for n in range(count):
                turns += await defer_then_decide(store, f"d-{n}")
            return (time.perf_counter() - began) / turns
        finally:
            await store.aclose()

    return trio.run(work)


def deferred(count: int, rounds: int, base: str) -> dict[str, Any]:
    """Scenario (d): the best of ``rounds`` passes per store, in microseconds per turn, and the ratios."""
    with tempfile.TemporaryDirectory(prefix="dial-bench-") as name:
        folder = Path(name)
        passes = itertools.count()
        stores: dict[str, Callable[[], StorePort]] = {
            "memory": lambda: open_store("memory:"),
            "sqlite": lambda: SQLiteStore(folder / f"new-{next(passes)}.db"),
        }
        results: dict[str, Any] = {"conversations": count, "base": base}
        try:
            module = base_sqlite(base, folder)
            stores["sqlite_base"] = lambda: module.SQLiteStore(folder / f"base-{next(passes)}.db")
        except RuntimeError as error:
            results["base_error"] = str(error)
        deferred_pass(stores["memory"], 10)  # warm up
        best = {name: float("inf") for name in stores}
        for round_ in range(rounds):
            order = list(stores) if round_ % 2 == 0 else list(reversed(stores))
            for name in order:
                best[name] = min(best[name], deferred_pass(stores[name], count))
    for name, seconds in best.items():
        results[f"{name}_us_per_turn"] = round(seconds * 1e6, 1)
    for name in ("sqlite", "sqlite_base"):
        if name in best:
            results[f"{name}_over_memory"] = round(best[name] / best["memory"], 2)
    return results


async def worker(url: str, prefix: str, count: int, concurrency: int) -> None:
    """Drive ``count`` conversations (2 or 3 says each) once told to on stdin; print each say's seconds as JSON."""
    store = open_store(url)
    agents = {f"{prefix}-{n}": Alternating(REPLIES) for n in range(count)}
    limiter = anyio.CapacityLimiter(concurrency)
    latencies: list[float] = []

    async def drive(conversation_id: str, says: int) -> None:
        async with limiter:
            for _ in range(says):
                began = time.perf_counter()
                await say(await Conversation.open(store, conversation_id, **parts(agents[conversation_id])))
                latencies.append(time.perf_counter() - began)

    await store.conversations()
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    async with anyio.create_task_group() as group:
        for n, conversation_id in enumerate(agents):
            group.start_soon(drive, conversation_id, says_of(n))
    await store.aclose()
    print(json.dumps(latencies), flush=True)


def parts(agent: Alternating) -> dict[str, Any]:
    """The rest of a scenario (a) conversation: the domain and a person who accepts."""
    return {"agent": agent, "domain": Notes(), "human": policy_human("accept")}


def says_of(n: int) -> int:
    """The number of ``say`` calls conversation ``n`` of a worker gets."""
    return 2 + n % 2


async def verify(url: str, expected: dict[str, int]) -> tuple[int, list[str]]:
    """Read and fold every log: how many logs are whole, and the problems found in the others."""
    store = open_store(url)
    problems: list[str] = []
    whole = 0
    try:
        prefix = next(iter(expected)).split("-")[0]
        stored = [each for each in await store.conversations() if each.startswith(f"{prefix}-")]
        if sorted(stored) != sorted(expected):
            problems.append(f"{len(stored)} conversations stored, {len(expected)} driven")
        for conversation_id, says in expected.items():
            log = await store.read(conversation_id)
            events = [entry.event for entry in log]
            state = ConversationState.fold(events)
            ids = [f"sg-{n}" for n in range(1, says + 1)]
            proposed = [getattr(event, "id", None) for event in events if event.type == "proposed"]
            outcomes = [
                (getattr(e, "id", None), getattr(e, "status", None)) for e in events if e.type == "outcome"
            ]
            checks = {
                "seqs are 1..N": [entry.seq for entry in log] == list(range(1, len(log) + 1)),
                "one said per call": sum(event.type == "said" for event in events) == says,
                "one suggestion per call": proposed == ids,
                "one outcome per suggestion, done": outcomes == [(ident, "done") for ident in ids],
                "two turns per call": sum(event.type == "reply" for event in events) == 2 * says,
                "nothing owed or open": not state.owes() and not state.open_suggestions and state.loop == "idle",
            }
            failed = [f"{conversation_id}: {check}" for check, ok in checks.items() if not ok]
            problems.extend(failed)
            whole += not failed
    finally:
        await store.aclose()
    return whole, problems


def workers(url: str, conversations: int, processes: int, concurrency: int) -> dict[str, Any]:
    """Drive ``conversations`` with ``processes`` worker processes at once, then verify every log."""
    share = conversations // processes
    run = uuid.uuid4().hex[:6]
    command = [sys.executable, __file__, "--worker", url, "--count", str(share), "--concurrency", str(concurrency)]
    pipe = subprocess.PIPE
    started = [
        subprocess.Popen([*command, "--prefix", f"{run}-w{index}"], stdin=pipe, stdout=pipe, text=True)
        for index in range(processes)
    ]
    latencies: list[float] = []
    try:
        for process in started:
            assert process.stdout is not None
            if process.stdout.readline() != "ready\n":
                raise RuntimeError(f"a worker did not start (exit status {process.wait()})")
        began = time.perf_counter()
        for process in started:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for process in started:
            assert process.stdout is not None
            line = process.stdout.readline()
            if process.wait(timeout=120) != 0 or not line:
                raise RuntimeError(f"a worker failed (exit status {process.returncode})")
            latencies.extend(json.loads(line))
        elapsed = time.perf_counter() - began
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    expected = {f"{run}-w{index}-{n}": says_of(n) for index in range(processes) for n in range(share)}
    whole, problems = trio.run(verify, url, expected)
    latencies.sort()
    return {
        "conversations": len(expected),
        "worker_processes": processes,
        "concurrency_per_worker": concurrency,
        "says": len(latencies),
        "seconds": round(elapsed, 3),
        "turns_per_s": round(2 * len(latencies) / elapsed, 1),
        "say_ms_p50": round(latencies[len(latencies) // 2] * 1e3, 2),
        "say_ms_p99": round(latencies[int(len(latencies) * 0.99)] * 1e3, 2),
        "whole_logs": whole,
        "problems": problems[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the benchmark runs")
    parser.add_argument("--concurrency", type=int, default=12, help="conversations a worker drives at once")
    parser.add_argument(
        "--base", default=MARKS_STORE, help="the commit whose SQLite store scenario (d) compares with this one"
    )
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker:
        trio.run(partial(worker, arguments.worker, arguments.prefix, arguments.count, arguments.concurrency))
        return
    smoke = arguments.smoke
    count, rounds, conversations = (20, 1, 20) if smoke else (1000, 3, 200)
    load = os.getloadavg()[0]  # other work on the machine inflates every time below
    decided = deferred(*((20, 1) if smoke else (300, 7)), arguments.base)
    with postgres() as url:
        stores = overheads(url, count, rounds)
        driven = workers(url("on"), conversations, 4, arguments.concurrency)
    print(
        json.dumps(
            {
                "benchmark": "store",
                "python": platform.python_version(),
                "smoke": smoke,
                "load_average_1m": round(load, 2),
                "a_conversations": count,
                **stores,
                "d": decided,
                "w": driven,
                "targets": {"sqlite_overhead_ms_per_turn": 1.0, "w_problems": 0},
            }
        )
    )
    if driven["problems"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
