"""``dial-runtime worker``: a process of the command itself fires a deadline on PostgreSQL with nobody holding
the conversation, prints ``ready``, stops cleanly at SIGTERM, and refuses a store it cannot serve in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from dial_runtime.deadlines import PostgresDeadlines

from .test_deadline_jobs import anyio_backend, check_expired_once, deferred, expired

__all__ = ["anyio_backend"]  # the fixture test_deadline_jobs defines: asyncio, real clocks

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[1]
COMMAND = [sys.executable, "-c", "import sys; from dial_runtime.cli import main; sys.exit(main(sys.argv[1:]))"]


async def test_the_worker_command_fires_a_deadline(pg_schema_url: str, tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text("[]", encoding="utf-8")  # an expiry sends the agent nothing
    argv = ["worker", "--store", pg_schema_url, "--agent", f"script:{script}", "--domain", "tests.fakes:Notes"]
    errors = tmp_path / "worker.err"
    with errors.open("wb") as stderr:
        process = await anyio.open_process([*COMMAND, *argv], stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT)
    try:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(30):
            assert await lines.receive_until(b"\n", 1024) == b"ready", errors.read_text()
        deadlines = await deferred(pg_schema_url, "c-1", 1.0)
        async with PostgresDeadlines(pg_schema_url) as scheduler:
            await scheduler.schedule("c-1", deadlines)
        check_expired_once(await expired(pg_schema_url, "c-1", within=10), deadlines[0][1])
        process.terminate()
        with anyio.fail_after(15):
            await process.wait()
        assert process.returncode == 0, errors.read_text()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


@pytest.mark.parametrize(
    ("store", "says"),
    [("sqlite:conversations.db", "fires deadlines stored on PostgreSQL"), ("memory:", "PostgreSQL")],
)
async def test_a_store_it_cannot_serve_is_one_line(store: str, says: str, tmp_path: Path) -> None:
    argv = ["worker", "--store", store, "--agent", "script:x.json", "--domain", "tests.fakes:Notes"]
    done = await anyio.run_process([*COMMAND, *argv], check=False, cwd=ROOT)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and says in err, err
