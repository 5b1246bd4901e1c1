"""``dial-runtime worker``: a process of the command itself fires a deadline on PostgreSQL with nobody holding
the conversation, prints ``ready``, stops cleanly at SIGTERM, and refuses a store it cannot serve in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from dial_runtime import Conversation, scripted_human
from dial_runtime.decisions.deadlines import PostgresDeadlines
from dial_runtime.stores import PostgresStore

from ..decisions.test_deadline_jobs import PROPOSE, anyio_backend, check_expired_once, deferred, expired
from ..fakes import Agent
from ..web.test_web_links_notify import Receiver
from ..web_server import serving
from ..worker_announcer import RemindingNotes

__all__ = ["anyio_backend"]  # the fixture test_deadline_jobs defines: asyncio, real clocks

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]
COMMAND = [sys.executable, "-c", "import sys; from dial_runtime.cli import main; sys.exit(main(sys.argv[1:]))"]


@asynccontextmanager
async def worker_command(argv: list[str], tmp_path: Path, **env: str) -> AsyncIterator[Process]:
    """A ``dial-runtime worker`` process, ready (it printed ``ready``); at the block's end it is sent SIGTERM and
    must stop cleanly (status 0) within 15 s, and is killed otherwise."""
    errors = tmp_path / "worker.err"
    with errors.open("wb") as stderr:
        process = await anyio.open_process(
            [*COMMAND, *argv], stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT, env={**os.environ, **env}
        )
    try:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(30):
            assert await lines.receive_until(b"\n", 1024) == b"ready", errors.read_text()
        yield process
        process.terminate()
        with anyio.fail_after(15):
            await process.wait()
        assert process.returncode == 0, errors.read_text()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


async def test_the_worker_command_fires_a_deadline(pg_schema_url: str, tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text("[]", encoding="utf-8")  # an expiry sends the agent nothing
    argv = ["worker", "--store", pg_schema_url, "--agent", f"script:{script}", "--domain", "tests.fakes:Notes"]
    async with worker_command(argv, tmp_path):
        deadlines = await deferred(pg_schema_url, "c-1", 1.0)
        async with PostgresDeadlines(pg_schema_url) as scheduler:
            await scheduler.schedule("c-1", deadlines)
        check_expired_once(await expired(pg_schema_url, "c-1", within=10), deadlines[0][1])


@pytest.mark.parametrize(
    ("store", "says"),
    [("sqlite:conversations.db", "fires deadlines stored on PostgreSQL"), ("memory:", "PostgreSQL")],
)
async def test_a_store_it_cannot_serve_is_one_line(store: str, says: str, tmp_path: Path) -> None:
    argv = ["worker", "--store", store, "--agent", "script:x.json", "--domain", "tests.fakes:Notes"]
    done = await anyio.run_process([*COMMAND, *argv], check=False, cwd=ROOT)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and says in err, err


async def test_the_worker_tells_of_the_reminders_and_expiries_it_fires(pg_schema_url: str, tmp_path: Path) -> None:
    """``--announce``: a reminder and an expiry fired by the worker process, with nobody else holding the
    conversation, reach a real webhook receiver, as the web surface tells of those it fires itself."""
    script = tmp_path / "replies.json"
    script.write_text("[]", encoding="utf-8")
    receiver = Receiver()
    with serving(receiver.app()) as hooks:
        argv = [
            "worker",
            "--store",
            pg_schema_url,
            "--agent",
            f"script:{script}",
            "--domain",
            "tests.worker_announcer:RemindingNotes",
            "--announce",
            "tests.worker_announcer:announcer",
        ]
        async with worker_command(argv, tmp_path, DIAL_TEST_HOOK=f"{hooks}/hook"):
            store = PostgresStore(pg_schema_url)
            try:
                conversation = await Conversation.open(
                    store,
                    "c-1",
                    agent=Agent([PROPOSE]),
                    domain=RemindingNotes(),
                    human=scripted_human(["defer"]),
                    decide_timeout=1.5,
                )
                assert (await conversation.say("add milk")).status == "awaiting"
                deadlines = conversation.deadlines
            finally:
                await store.aclose()
            async with PostgresDeadlines(pg_schema_url) as scheduler:
                await scheduler.schedule("c-1", deadlines)
            reminded, decided = await anyio.to_thread.run_sync(receiver.wait, "c-1", 2)
    assert (reminded.kind, reminded.recipients, reminded.suggestion_id) == ("reminder", ("ada",), "sg-1")
    assert (decided.kind, decided.suggestion_id) == ("decided", "sg-1")
    assert decided.status == "dismissed"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("tests.worker_announcer:not_an_announcer", "returned str, not an Announcer"),
        ("tests.worker_announcer:nothing", "tests.worker_announcer:nothing"),
        ("no_such_module:announcer", "cannot import no_such_module"),
    ],
)
async def test_an_announcer_it_cannot_use_is_one_line(spec: str, says: str, pg_schema_url: str) -> None:
    argv = ["worker", "--store", pg_schema_url, "--agent", "script:x.json", "--domain", "tests.fakes:Notes"]
    done = await anyio.run_process([*COMMAND, *argv, "--announce", spec], check=False, cwd=ROOT)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and says in err, err
