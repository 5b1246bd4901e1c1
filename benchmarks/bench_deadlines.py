"""Deadline benchmark: prints one JSON line.

200 conversations on the PostgreSQL store, each with one suggestion the person defers, their deadlines spread
evenly over ten seconds a few seconds ahead; each scheduled as a Procrastinate job (``PostgresDeadlines``) as
its conversation is made; 2 worker processes (``tests.deadline_worker_child``, the settings ``dial-runtime``
uses: ``poll`` 0.2 s, ``concurrency`` 8) fire them while this process holds no conversation. Then every log is
read: each must end its suggestion ``dismissed``, ``expired``, once, and fold; the figures are how late each
expiry was recorded past its deadline (the expiry entry's time minus the logged deadline, both from the
machine's clock), p50, p99 and max, in milliseconds. Target: p99 at most 1 s.

What the poll costs: ``idle_cpu_pct_per_worker`` is a worker's CPU time over a few idle seconds before any job
(its fetch query every ``poll`` seconds, its heartbeats), in percent of one core; ``fetch_queries_per_s`` is what
the workers send the server while idle.

The PostgreSQL server is the one ``DIAL_TEST_POSTGRES_URL`` names, else a throwaway cluster started like the
tests' (``tests/pg.py``) but syncing to disk; a fresh schema holds the logs and Procrastinate's tables and is
dropped at the end. ``--smoke`` runs tiny sizes, for CI: 20 deadlines over two seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))

from dial_runtime import Conversation, scripted_human  # noqa: E402
from dial_runtime.decisions.deadlines import PostgresDeadlines  # noqa: E402
from dial_runtime.runtime.events import DecidedEvent, OutcomeEvent, SuggestionEvent  # noqa: E402
from dial_runtime.stores import PostgresStore  # noqa: E402
from dial_runtime.stores.jsonl import check_log  # noqa: E402
from tests.fakes import Agent, Notes, envelope, suggest  # noqa: E402

PROPOSE = envelope(suggest("add-note", '{"text": "milk"}'))
WORKERS = 2
POLL = 0.2


@contextmanager
def postgres() -> Iterator[str]:
    """For the block's length: the URL of a fresh schema of a PostgreSQL server."""
    from tests.pg import server

    with server(fsync=True) as url:
        schema = f"bench_{uuid.uuid4().hex}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"CREATE SCHEMA {schema}")
        try:
            yield f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"
        finally:
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute(f"DROP SCHEMA {schema} CASCADE")


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def workers(url: str, folder: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The worker processes, each ready (it said so in its output file); stopped at the end."""
    command = [sys.executable, "-m", "tests.deadline_worker_child", url, "fire", json.dumps({"poll": POLL})]
    outputs = [folder / f"w{index}.out" for index in range(WORKERS)]
    started = []
    for index, output in enumerate(outputs):
        with output.open("wb") as stdout, (folder / f"w{index}.err").open("wb") as stderr:
            started.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=ROOT))
    try:
        give_up = time.monotonic() + 60
        while not all(output.read_text().startswith("ready") for output in outputs):
            if time.monotonic() > give_up or any(p.poll() is not None for p in started):
                errors = [(folder / f"w{i}.err").read_text(errors="replace") for i in range(WORKERS)]
                raise RuntimeError(f"a worker did not start: {errors}")
            time.sleep(0.05)
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def make(url: str, prefix: str, count: int, lead: float, spread: float) -> dict[str, float]:
    """``count`` conversations, each awaiting a decision, their deadlines ``lead`` seconds from now and then
    evenly over ``spread`` seconds; each scheduled as it is made. Their deadlines, by conversation."""
    store = PostgresStore(url)
    deadlines: dict[str, float] = {}
    try:
        async with PostgresDeadlines(url) as scheduler:
            first = time.time() + lead
            for n in range(count):
                conversation_id = f"{prefix}-{n}"
                due = first + spread * n / max(count - 1, 1)
                conversation = await Conversation.open(
                    store,
                    conversation_id,
                    agent=Agent([PROPOSE]),
                    domain=Notes(),
                    human=scripted_human(["defer"]),
                    decide_timeout=max(due - time.time(), 0.05),
                )
                result = await conversation.say("add milk")
                assert result.status == "awaiting", result
                await scheduler.schedule(conversation_id, conversation.deadlines)
                ((_, deadlines[conversation_id]),) = conversation.deadlines
    finally:
        await store.aclose()
    return deadlines


async def collect(url: str, deadlines: dict[str, float], within: float) -> tuple[list[float], list[str]]:
    """Wait (``within`` seconds at most) until every conversation records its expiry; then how late each was,
    and what is wrong with any log."""
    store = PostgresStore(url)
    late: list[float] = []
    problems: list[str] = []
    try:
        give_up = time.monotonic() + within
        await asyncio.sleep(max(deadlines.values()) + 1.0 - time.time())  # reading meanwhile would load the server
        left = set(deadlines)
        while left and time.monotonic() < give_up:
            for conversation_id in sorted(left):
                log = await store.read(conversation_id)
                if any(isinstance(e.event, DecidedEvent) and e.event.decision == "expire" for e in log):
                    left.discard(conversation_id)
            await asyncio.sleep(0.5)
        problems += [f"{conversation_id}: never expired" for conversation_id in sorted(left)]
        for conversation_id, deadline in sorted(deadlines.items()):
            log = await store.read(conversation_id)
            try:
                check_log(log)
            except Exception as error:
                problems.append(f"{conversation_id}: {error}")
                continue
            expiries = [e for e in log if isinstance(e.event, DecidedEvent) and e.event.decision == "expire"]
            outcomes = [(e.event.status, e.event.expired) for e in log if isinstance(e.event, OutcomeEvent)]
            shown = [e.event.deadline for e in log if isinstance(e.event, SuggestionEvent)]
            if shown != [deadline] or (expiries and outcomes != [("dismissed", True)]) or len(expiries) > 1:
                problems.append(f"{conversation_id}: {len(expiries)} expiries, outcomes {outcomes}")
            elif expiries:
                late.append(expiries[0].time - deadline)
    finally:
        await store.aclose()
    return sorted(late), problems


def figures(late: list[float], spread: float) -> dict[str, Any]:
    """How late the expiries were, in milliseconds."""
    ms = [value * 1e3 for value in late]

    def percentile(share: float) -> float | None:
        return round(ms[min(len(ms) - 1, int(len(ms) * share))], 1) if ms else None

    return {
        "spread_s": spread,
        "expired": len(ms),
        "late_ms_p50": percentile(0.5),
        "late_ms_p99": percentile(0.99),
        "late_ms_max": round(ms[-1], 1) if ms else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the benchmark runs")
    arguments = parser.parse_args()
    smoke = arguments.smoke
    count, lead, spread, idle = (20, 2.0, 2.0, 1.0) if smoke else (200, 6.0, 10.0, 3.0)
    load = os.getloadavg()[0]
    with postgres() as url, tempfile.TemporaryDirectory(prefix="dial-bench-") as folder:

        async def prepare() -> None:
            async with PostgresDeadlines(url):  # the schema, before the workers race to apply it
                pass

        asyncio.run(prepare())
        with workers(url, Path(folder)) as started:
            before = [cpu_seconds(p.pid) for p in started]
            time.sleep(idle)
            idle_cpu = [(cpu_seconds(p.pid) - b) / idle * 100 for p, b in zip(started, before, strict=True)]
            deadlines = asyncio.run(make(url, "a", count, lead, spread))
            late, problems = asyncio.run(collect(url, deadlines, within=lead + spread + 30))
            burst = asyncio.run(make(url, "b", count, lead + count * 0.03, 0.0))
            burst_late, burst_problems = asyncio.run(collect(url, burst, within=lead + count * 0.03 + 30))
    print(
        json.dumps(
            {
                "benchmark": "deadlines",
                "python": platform.python_version(),
                "smoke": smoke,
                "load_average_1m": round(load, 2),
                "deadlines": count,
                "worker_processes": WORKERS,
                "poll_s": POLL,
                "a": figures(late, spread),
                "b": figures(burst_late, 0.0),
                "idle_cpu_pct_per_worker": round(sum(idle_cpu) / len(idle_cpu), 2),
                "fetch_queries_per_s": round(WORKERS / POLL, 1),
                "problems": (problems + burst_problems)[:10],
                "targets": {"a_late_ms_p99": 1000, "problems": 0},
            }
        )
    )
    if problems or burst_problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
