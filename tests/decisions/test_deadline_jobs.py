"""Deadlines that fire with nobody watching, on PostgreSQL: each deadline a Procrastinate job in the store's
database, fired by worker processes (``tests.deadline_worker_child``) that hold no conversation until a job
opens one.

A conversation is made here (its suggestion deferred, with a deadline a second or two ahead), its deadlines
scheduled, and every handle on it closed; then the workers must end the suggestion ``dismissed``, ``expired``,
once, within a bound of its deadline, in a log that folds: with one worker, with two of which one is SIGKILLed
before the deadline or mid-job, with the deadline scheduled several times over, and not at all (the job does
nothing) when the person decided in time. Real server, real processes, real clocks; the tests run on asyncio, as
Procrastinate does.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from dial_runtime import Accept, Conversation, scripted_human
from dial_runtime.decisions.deadlines import PostgresDeadlines
from dial_runtime.runtime.events import DecidedEvent, LogEntry, OutcomeEvent, SuggestionEvent
from dial_runtime.stores import PostgresStore
from dial_runtime.stores.jsonl import check_log

from ..children import Worker
from ..fakes import Agent, Notes, PremisedNotes, envelope, suggest

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]
PROPOSE = envelope(suggest("add-note", '{"text": "milk"}'))
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")

#: How late past its deadline an expiry may be recorded here (seconds): the design's bound is the poll (0.2 s)
#: plus the expiry; the rest is room for a loaded machine.
LATE = 2.0

#: Settings that make a killed worker's job come back within seconds.
QUICK_RECOVERY: dict[str, Any] = {"heartbeat": 0.5, "stalled_after": 2.0, "recover_every": 1}


@pytest.fixture
def anyio_backend() -> str:
    """Real clocks on asyncio: the tests wait on processes and a server, and Procrastinate is asyncio only."""
    return "asyncio"


@asynccontextmanager
async def worker(url: str, tmp: Path, name: str, mode: str = "fire", **options: Any) -> AsyncIterator[Worker]:
    """A worker started and ready; stopped (SIGTERM, then SIGKILL) when the block ends."""
    errors = tmp / f"{name}.err"
    command = [sys.executable, "-m", "tests.deadline_worker_child", url, mode, json.dumps(options)]
    with errors.open("wb") as stderr:
        process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT)
    try:
        started = Worker(process, errors)
        await started.expect("ready")
        yield started
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await process.aclose()


async def deferred(url: str, conversation_id: str, seconds: float, *, replies: int = 1) -> list[tuple[str, float]]:
    """Make a conversation whose suggestion the person defers, with ``seconds`` to decide; its deadlines. The
    store is closed on return: no process holds the conversation."""
    store = PostgresStore(url)
    try:
        conversation = await Conversation.open(
            store,
            conversation_id,
            agent=Agent([PROPOSE] + [ACK] * (replies - 1)),
            domain=Notes(),
            human=scripted_human(["defer"]),
            decide_timeout=seconds,
        )
        assert (await conversation.say("add milk")).status == "awaiting"
        return conversation.deadlines
    finally:
        await store.aclose()


async def read(url: str, conversation_id: str) -> list[LogEntry]:
    store = PostgresStore(url)
    try:
        return await store.read(conversation_id)
    finally:
        await store.aclose()


def expiries(log: list[LogEntry]) -> list[LogEntry]:
    return [e for e in log if isinstance(e.event, DecidedEvent) and e.event.decision == "expire"]


async def expired(url: str, conversation_id: str, within: float) -> list[LogEntry]:
    """The conversation's log once it records an expiry (polled every 20 ms, for ``within`` seconds)."""
    with anyio.fail_after(within):
        while True:
            log = await read(url, conversation_id)
            if expiries(log):
                return log
            await anyio.sleep(0.02)


def check_expired_once(log: list[LogEntry], deadline: float) -> float:
    """The log ends the suggestion dismissed/expired once, by nobody, and folds; returns how late it was."""
    check_log(log)
    outcomes = [e.event for e in log if isinstance(e.event, OutcomeEvent)]
    assert [(o.id, o.status, o.expired) for o in outcomes] == [("sg-1", "dismissed", True)]
    (expiry,) = expiries(log)
    assert isinstance(expiry.event, DecidedEvent) and expiry.event.by is None
    shown = next(e.event for e in log if isinstance(e.event, SuggestionEvent))
    assert shown.deadline == deadline
    late = expiry.time - deadline
    assert 0 <= late < LATE, f"the expiry was recorded {late:.3f} s after the deadline"
    return late


async def no_job_left(url: str, within: float) -> None:
    """Wait until the database holds no deadline job (each finished job is deleted once its worker wrote what it
    had to): from then on no worker writes to the conversation."""
    with anyio.fail_after(within):
        while jobs(url):
            await anyio.sleep(0.02)


def jobs(url: str) -> list[tuple[str, str, str | None]]:
    """Procrastinate's jobs in the database: task, status, queueing lock."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT task_name, status::text, queueing_lock FROM procrastinate_jobs"
        ).fetchall()
    return [(task, status, lock) for task, status, lock in rows if task != "dial_runtime.retry_stalled_deadlines"]


async def test_a_deadline_fires_with_no_process_holding_the_conversation(
    pg_schema_url: str, tmp_path: Path
) -> None:
    async with worker(pg_schema_url, tmp_path, "w1") as fired:
        deadlines = await deferred(pg_schema_url, "c-1", 1.0)
        async with PostgresDeadlines(pg_schema_url) as scheduler:
            await scheduler.schedule("c-1", deadlines)
        assert await fired.expect("job c-1", within=10 + LATE)
        log = await expired(pg_schema_url, "c-1", within=LATE)
        check_expired_once(log, deadlines[0][1])
        await no_job_left(pg_schema_url, within=10)  # a finished job is deleted ...
        assert await read(pg_schema_url, "c-1") == log  # ... having written nothing more: no second expiry
        fired.process.terminate()  # SIGTERM stops a worker cleanly
        with anyio.fail_after(10):
            assert await fired.process.wait() == 0, fired.failed("SIGTERM did not stop the worker cleanly")


async def test_of_two_workers_one_killed_before_the_deadline_the_other_fires_it(
    pg_schema_url: str, tmp_path: Path
) -> None:
    async with worker(pg_schema_url, tmp_path, "w1") as doomed, worker(pg_schema_url, tmp_path, "w2") as survivor:
        deadlines = await deferred(pg_schema_url, "c-1", 1.5)
        async with PostgresDeadlines(pg_schema_url) as scheduler:
            await scheduler.schedule("c-1", deadlines)
        assert deadlines[0][1] - time.time() > 0.5, "the kill must come before the deadline"
        await doomed.kill()
        await survivor.expect("job c-1", within=10 + LATE)
        check_expired_once(await expired(pg_schema_url, "c-1", within=LATE), deadlines[0][1])


async def test_a_job_whose_worker_is_killed_mid_job_is_put_back_and_fired_by_another(
    pg_schema_url: str, tmp_path: Path
) -> None:
    deadlines = await deferred(pg_schema_url, "c-1", 0.5)
    async with worker(pg_schema_url, tmp_path, "w1", "hang", **QUICK_RECOVERY) as hung:
        async with PostgresDeadlines(pg_schema_url) as scheduler:
            await scheduler.schedule("c-1", deadlines)
        await hung.expect("job c-1", within=10)
        assert [status for _, status, _ in jobs(pg_schema_url)] == ["doing"]
        await hung.kill()  # its job stays "doing", its heartbeat stops
    async with worker(pg_schema_url, tmp_path, "w2", **QUICK_RECOVERY) as other:
        await other.expect("job c-1", within=20)
        log = await expired(pg_schema_url, "c-1", within=10)
    check_log(log)
    assert [(e.event.id, e.event.expired) for e in log if isinstance(e.event, OutcomeEvent)] == [("sg-1", True)]


async def test_scheduling_a_deadline_again_makes_no_second_job_and_it_expires_once(
    pg_schema_url: str, tmp_path: Path
) -> None:
    deadlines = await deferred(pg_schema_url, "c-1", 2.0)
    async with PostgresDeadlines(pg_schema_url) as one, PostgresDeadlines(pg_schema_url) as another:
        for scheduler in (one, another, one):
            await scheduler.schedule("c-1", deadlines)
    (job,) = jobs(pg_schema_url)
    assert job[:2] == ("dial_runtime.expire_deadline", "todo")
    async with worker(pg_schema_url, tmp_path, "w1"), worker(pg_schema_url, tmp_path, "w2"):  # either may fire
        check_expired_once(await expired(pg_schema_url, "c-1", within=10 + LATE), deadlines[0][1])
        await no_job_left(pg_schema_url, within=10)  # the one job ran and is gone: neither worker writes again
        assert len(expiries(await read(pg_schema_url, "c-1"))) == 1


async def test_a_decision_in_time_makes_the_job_a_no_op(pg_schema_url: str, tmp_path: Path) -> None:
    deadlines = await deferred(pg_schema_url, "c-1", 1.5, replies=2)
    async with PostgresDeadlines(pg_schema_url) as scheduler:
        await scheduler.schedule("c-1", deadlines)
    store = PostgresStore(pg_schema_url)
    try:
        conversation = await Conversation.open(
            store, "c-1", agent=Agent([ACK]), domain=Notes(), human=scripted_human([]), decide_timeout=1.5
        )
        await conversation.decide("sg-1", Accept())
    finally:
        await store.aclose()
    decided = await read(pg_schema_url, "c-1")
    assert [e.event.status for e in decided if isinstance(e.event, OutcomeEvent)] == ["done"]
    async with worker(pg_schema_url, tmp_path, "w1") as fired:
        await fired.expect("job c-1", within=10 + LATE)
        await no_job_left(pg_schema_url, within=10)  # the job ends (and is deleted) without writing anything
    assert await read(pg_schema_url, "c-1") == decided


async def test_a_worker_checks_a_waiting_premise_on_schedule_and_ends_the_card_once_it_broke(
    pg_schema_url: str, tmp_path: Path
) -> None:
    closed = tmp_path / "closed"
    async with worker(pg_schema_url, tmp_path, "w1", premise_file=str(closed)):
        store = PostgresStore(pg_schema_url)
        try:
            conversation = await Conversation.open(
                store,
                "p-1",
                agent=Agent([PROPOSE]),
                domain=PremisedNotes(str(closed)),
                human=scripted_human(["defer"]),
            )
            assert (await conversation.say("add milk")).status == "awaiting"
            waits = conversation.deadlines
        finally:
            await store.aclose()
        logged = len(await read(pg_schema_url, "p-1"))
        async with PostgresDeadlines(pg_schema_url) as scheduler:
            await scheduler.schedule("p-1", waits)
        await anyio.sleep(2.5)  # two checks came, and the premise held: nothing is logged
        assert len(await read(pg_schema_url, "p-1")) == logged
        closed.touch()
        with anyio.fail_after(5 + LATE):
            while True:
                log = await read(pg_schema_url, "p-1")
                outcomes = [e.event for e in log if isinstance(e.event, OutcomeEvent)]
                if outcomes:
                    break
                await anyio.sleep(0.05)
        check_log(log)
        (ended,) = outcomes
        assert (ended.status, ended.code, ended.trigger) == ("invalid", "closed", "lapse")
