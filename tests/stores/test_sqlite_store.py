"""The SQLite store's own rules: the database is the only record, appends serialise across processes with the
seq check inside their transaction, durability is a setting, a cancelled append is all or nothing and says
which, calls that need not wait stay on the event loop, and a watch hears other processes."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from dial_runtime.errors import ConversationBusy
from dial_runtime.runtime.events import LogEntry, SaidEvent
from dial_runtime.stores import SQLiteStore, StoreConflict, StoreError, StorePort, open_store
from dial_runtime.stores import sqlite as sqlite_store
from dial_runtime.stores.base import encode

from .test_stores import next_change, quiet, said

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]

#: Appends to one conversation from argv[2] concurrently with its peers, once told to on stdin: each batch (of
#: 1 to 3 entries, texts "<writer> <batch> <index> <size>") is appended after the end last read, and on a
#: conflict the writer reads on and tries again. Prints how many batches landed and how many conflicted.
WRITER = """
import json, sys, anyio
from dial_runtime.errors import ConversationBusy
from dial_runtime.runtime.events import LogEntry, SaidEvent
from dial_runtime.stores import StoreConflict, open_store

async def main(url, writer, batches):
    store = open_store(url)
    end = len(await store.read("shared"))
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    landed = conflicts = 0
    with anyio.fail_after(60):
        while landed < batches:
            size = 1 + landed % 3
            texts = [f"{writer} {landed} {index} {size}" for index in range(size)]
            entries = [LogEntry(seq=end + 1 + n, time=0.0, event=SaidEvent(text=t)) for n, t in enumerate(texts)]
            try:
                await store.append("shared", entries, expected_seq=end)
            except StoreConflict:
                conflicts += 1
                end += len(await store.read("shared", after_seq=end))
            else:
                landed += 1
                end += size
    await store.aclose()
    print(json.dumps({"landed": landed, "conflicts": conflicts}), flush=True)

anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""

#: Appends one entry to each conversation named after argv[1], then exits.
APPENDER = """
import sys, anyio
from dial_runtime.errors import ConversationBusy
from dial_runtime.runtime.events import LogEntry, SaidEvent
from dial_runtime.stores import open_store

async def main():
    store = open_store(sys.argv[1])
    for conversation_id in sys.argv[2:]:
        end = len(await store.read(conversation_id))
        entry = LogEntry(seq=end + 1, time=0.0, event=SaidEvent(text="from another process"))
        await store.append(conversation_id, [entry], expected_seq=end)
    await store.aclose()

anyio.run(main)
"""


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the store waits on threads and processes, which a virtual clock would skip past."""
    return real_clocks


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "logs.db"


def synchronous(store: StorePort) -> int:
    """The ``PRAGMA synchronous`` of the store's connection (1: NORMAL, 2: FULL); it is not kept in the file."""
    assert isinstance(store, SQLiteStore) and store._connection is not None
    (value,) = store._connection.execute("PRAGMA synchronous").fetchone()
    return int(value)


def rival(path: Path) -> sqlite3.Connection:
    """Another program's connection to the file, holding its write lock."""
    connection = sqlite3.connect(path, isolation_level=None, timeout=0)
    connection.execute("BEGIN IMMEDIATE")
    return connection


def insert(connection: sqlite3.Connection, entry: LogEntry, conversation_id: str = "c") -> None:
    connection.execute(
        "INSERT INTO dial_log (conversation_id, seq, time, entry) VALUES (?, ?, ?, ?)",
        (conversation_id, entry.seq, entry.time, encode(entry)),
    )


async def test_appends_from_many_processes_serialise(path: Path) -> None:
    """Four processes append to one conversation at once: every append lands whole, in its writer's order, or
    is refused as a conflict; the log numbers on without a gap."""
    writers, batches = 4, 60
    command = [sys.executable, "-c", WRITER, f"sqlite:{path}"]
    pipe = subprocess.PIPE
    processes = [
        await anyio.open_process([*command, f"w{n}", str(batches)], stdin=pipe, stdout=pipe, cwd=ROOT)
        for n in range(writers)
    ]
    reports: list[dict[str, int]] = []
    try:
        with anyio.fail_after(120):
            outputs = [b""] * writers
            for n, process in enumerate(processes):
                assert process.stdout is not None
                while b"\n" not in outputs[n]:
                    outputs[n] += await process.stdout.receive()
                assert outputs[n] == b"ready\n"
            for process in processes:
                assert process.stdin is not None
                await process.stdin.send(b"go\n")
            for n, process in enumerate(processes):
                assert process.stdout is not None
                async for chunk in process.stdout:
                    outputs[n] += chunk
                assert await process.wait() == 0
                reports.append(json.loads(outputs[n].splitlines()[1]))
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert [report["landed"] for report in reports] == [batches] * writers

    store = SQLiteStore(path)
    log = await store.read("shared")
    await store.aclose()
    assert [entry.seq for entry in log] == list(range(1, len(log) + 1))
    texts = [entry.event.text for entry in log if isinstance(entry.event, SaidEvent)]
    assert len(texts) == len(log) == writers * sum(1 + n % 3 for n in range(batches))
    seen: dict[str, int] = {}
    position = 0
    while position < len(texts):
        writer, batch, _, size = texts[position].split()
        assert int(batch) == seen.get(writer, -1) + 1, "a writer's appends landed out of order"
        assert texts[position : position + int(size)] == [f"{writer} {batch} {n} {size}" for n in range(int(size))]
        seen[writer] = int(batch)
        position += int(size)


async def test_the_seq_check_runs_inside_the_append_transaction(path: Path) -> None:
    """An append that finds another connection writing waits for it, then checks where the log ends: the rival
    appended, so it conflicts and writes nothing."""
    store = SQLiteStore(path)
    await store.append("c", [said(1, "a")], expected_seq=0)
    writer = rival(path)
    outcome: list[object] = []

    async def append() -> None:
        try:
            await store.append("c", [said(2, "mine")], expected_seq=1)
        except StoreConflict as error:
            outcome.append(error)
        else:
            outcome.append(None)

    try:
        insert(writer, said(2, "rival"))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(append)
                await anyio.sleep(0.2)
                assert outcome == []  # it waits for the rival's write lock
                writer.execute("COMMIT")
    finally:
        writer.close()
    assert isinstance(outcome[0], StoreConflict)
    assert await store.read("c") == [said(1, "a"), said(2, "rival")]
    await store.aclose()


async def test_every_call_asks_the_database(path: Path, keep: Callable[[StorePort], StorePort]) -> None:
    """Nothing about a log is kept outside the database: a row another program inserts is read at once, the lock
    folder can go between any two calls, and appends and reads write nothing beside the database."""
    store, other = keep(open_store(f"sqlite:{path}")), keep(open_store(f"sqlite:{path}"))
    locks = path.with_name("logs.db.locks")
    await store.append("c", [said(1, "a"), said(2, "b")], expected_seq=0)
    assert await other.read("c", after_seq=2) == []
    outsider = sqlite3.connect(path, isolation_level=None)
    insert(outsider, said(3, "c"))
    outsider.close()
    assert await other.read("c", after_seq=2) == [said(3, "c")]
    async with store.lock("c"):
        pass
    shutil.rmtree(locks)
    assert await store.read("c", after_seq=1) == [said(2, "b"), said(3, "c")]
    with pytest.raises(StoreConflict):
        await store.append("c", [said(3, "x")], expected_seq=2)
    await other.append("c", [said(4, "d")], expected_seq=3)
    assert await store.read("c", after_seq=3) == [said(4, "d")]
    assert await store.conversations() == ["c"]
    assert not locks.exists()
    async with other.lock("c"):
        with pytest.raises(ConversationBusy):  # the lock file is made again, and locks
            async with store.lock("c"):
                pass


async def test_a_wait_for_another_writer_is_bounded(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append that waits longer than ``BUSY_TIMEOUT`` for another connection's write lock fails with one
    line naming the file, writes nothing, and leaves the store usable."""
    store = SQLiteStore(path)
    await store.append("c", [said(1, "a")], expected_seq=0)
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT", 0.2)
    writer = rival(path)
    try:
        with anyio.fail_after(10), pytest.raises(StoreError, match=re.escape(str(path))) as raised:
            await store.append("c", [said(2, "b")], expected_seq=1)
        assert "\n" not in str(raised.value) and "0.2 s" in str(raised.value)
    finally:
        writer.close()
    assert await store.read("c") == [said(1, "a")]
    await store.append("c", [said(2, "b")], expected_seq=1)
    assert await store.read("c") == [said(1, "a"), said(2, "b")]
    await store.aclose()


@pytest.mark.parametrize(
    ("opened", "expected"),
    [
        (lambda path: SQLiteStore(path), 1),
        (lambda path: SQLiteStore(path, durability="normal"), 1),
        (lambda path: SQLiteStore(path, durability="full"), 2),
        (lambda path: open_store(f"sqlite:{path}"), 1),
        (lambda path: open_store(f"sqlite:{path}?synchronous=normal"), 1),
        (lambda path: open_store(f"sqlite:{path}?synchronous=full"), 2),
        (lambda path: open_store(f"sqlite://{path}?synchronous=FULL"), 2),
        (lambda path: open_store(f"sqlite:{path}?synchronous=full", create=False), 2),
    ],
    ids=["default", "normal", "full", "url", "url-normal", "url-full", "url-absolute-upper", "read-only"],
)
async def test_durability_is_set_on_the_connection(
    path: Path, keep: Callable[[StorePort], StorePort], opened: Callable[[Path], StorePort], expected: int
) -> None:
    first = keep(SQLiteStore(path))
    await first.append("c", [said(1, "a")], expected_seq=0)
    store = keep(opened(path))
    assert isinstance(store, SQLiteStore) and store.path == path
    assert await store.read("c") == [said(1, "a")]
    if store.create:
        await store.append("c", [said(2, "b")], expected_seq=1)
        assert await first.read("c") == [said(1, "a"), said(2, "b")]
    assert synchronous(store) == expected


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:logs.db?synchronous=off",
        "sqlite:logs.db?synchronous=",
        "sqlite:logs.db?synchronous=full&synchronous=normal",
        "sqlite:logs.db?mode=ro",
        "sqlite:logs.db?synchronous=full&timeout=5",
        "sqlite:?synchronous=full",
    ],
)
def test_a_bad_sqlite_option_is_one_line(url: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(url))) as raised:
        open_store(url)
    assert "\n" not in str(raised.value)


def test_a_bad_durability_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^SQLite store 'logs.db': durability 'fast' is not 'normal' or 'full'$"):
        SQLiteStore("logs.db", durability="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("durability", ["normal", "full"])
@pytest.mark.parametrize("other_writer", ["none", "rolls-back", "commits"])
async def test_a_cancelled_append_is_whole_or_absent_and_says_which(
    path: Path, durability: Any, other_writer: str
) -> None:
    """The caller's scope is cancelled while its append runs (in a worker thread, waiting for another writer's
    lock or for its own disk flush): the append still returns what it did, the cancellation lands at the
    caller's next checkpoint, the log holds all of the entries or none, and the store goes on."""
    store = SQLiteStore(path, durability=durability)
    await store.append("c", [said(1, "a")], expected_seq=0)
    writer = rival(path) if other_writer != "none" else None
    if writer is not None and other_writer == "commits":
        insert(writer, said(2, "rival"))
    outcome: list[str] = []

    async def append(*, task_status: anyio.abc.TaskStatus[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            try:
                await store.append("c", [said(2, "b"), said(3, "c")], expected_seq=1)
            except StoreConflict:
                outcome.append("conflict")
            except BaseException:
                outcome.append("cancelled")
                raise
            else:
                outcome.append("appended")
            await anyio.sleep(0)
            outcome.append("not cancelled")

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                scope = await group.start(append)
                scope.cancel()
                if writer is not None:
                    await anyio.sleep(0.1)
                    assert outcome == []  # still waiting for the lock, cancelled
                    writer.execute("ROLLBACK" if other_writer == "rolls-back" else "COMMIT")
    finally:
        if writer is not None:
            writer.close()
    assert outcome[0] in ("appended", "conflict")
    log = await store.read("c")
    if outcome[0] == "appended":
        assert log == [said(1, "a"), said(2, "b"), said(3, "c")]
    else:
        assert other_writer == "commits" and log == [said(1, "a"), said(2, "rival")]
    await store.append("c", [said(len(log) + 1, "on")], expected_seq=len(log))
    assert len(await store.read("c")) == len(log) + 1
    await store.aclose()


async def test_calls_that_need_not_wait_stay_on_the_event_loop(
    path: Path, keep: Callable[[StorePort], StorePort], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the database runs in a worker thread; after that a read, a list or an append (``normal``) runs on
    the event loop, with no thread's round trip. A ``full`` append waits for a disk flush: in a worker thread."""
    store, full = keep(SQLiteStore(path)), keep(SQLiteStore(path, durability="full"))
    await store.read("c")
    await full.read("c")
    trips: list[object] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(function: Callable[..., Any], *args: Any, **options: Any) -> Any:
        trips.append(function)
        return await run_sync(function, *args, **options)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    for seq in range(1, 21):
        await store.append("c", [said(seq, "x" * seq * 100)], expected_seq=seq - 1)
        assert await store.read("c", after_seq=seq - 1) == [said(seq, "x" * seq * 100)]
        assert await store.conversations() == ["c"]
    assert trips == []
    await full.append("c", [said(21, "synced")], expected_seq=20)
    assert len(trips) == 1
    assert (await store.read("c", after_seq=20))[0].event == SaidEvent(text="synced")


async def test_the_write_ahead_log_stays_bounded(path: Path, keep: Callable[[StorePort], StorePort]) -> None:
    """SQLite checkpoints the write-ahead log as it grows (every 1000 pages), so it is reused, not grown."""
    store = keep(SQLiteStore(path))
    for seq in range(1, 1501):
        await store.append("c", [said(seq, "x" * 4000)], expected_seq=seq - 1)
    assert path.stat().st_size > 6_000_000
    assert path.with_name("logs.db-wal").stat().st_size < 6_000_000


async def test_a_watch_of_every_conversation_hears_another_process_as_any(
    path: Path, keep: Callable[[StorePort], StorePort]
) -> None:
    """A watch of every conversation hears appends other processes make (SQLite's data_version, polled) as
    ``None``: the file changed, and the file cannot say which conversation did; its own process's by name."""
    watching = keep(open_store(f"sqlite:{path}"))
    command = [sys.executable, "-c", APPENDER, f"sqlite:{path}"]
    async with watching.watch() as changes:
        with anyio.fail_after(30):
            await anyio.run_process([*command, "c2"], cwd=ROOT)
        assert await next_change(changes) is None
        assert await quiet(changes)
        await watching.append("c3", [said(1, "here")], expected_seq=0)
        assert await next_change(changes) == "c3"


async def test_a_watch_hears_another_process(path: Path, keep: Callable[[StorePort], StorePort]) -> None:
    """A watch of one conversation notices appends that other processes make to it (SQLite's data_version,
    polled), and stays quiet for appends they make to other conversations."""
    watching = keep(open_store(f"sqlite:{path}"))
    command = [sys.executable, "-c", APPENDER, f"sqlite:{path}"]
    async with watching.watch("c1") as changes:
        with anyio.fail_after(30):
            await anyio.run_process([*command, "c2"], cwd=ROOT)
        assert await quiet(changes)
        with anyio.fail_after(30):
            await anyio.run_process([*command, "c1"], cwd=ROOT)
        assert await next_change(changes) == "c1"
        assert [entry.seq for entry in await watching.read("c1")] == [1]
        assert await quiet(changes)
