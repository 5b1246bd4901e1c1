"""The event-log stores: one suite over the in-process, SQLite and PostgreSQL stores, on trio and asyncio."""

from __future__ import annotations

import hashlib
import itertools
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest

from dial_runtime.agents import ScriptedAgent
from dial_runtime.demo import NotesDomain, run_demo
from dial_runtime.driver import Conversation, policy_human
from dial_runtime.errors import ConversationBusy
from dial_runtime.runtime.events import LogEntry, SaidEvent
from dial_runtime.stores import (
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    StoreClosed,
    StoreConflict,
    StoreError,
    StorePort,
    open_store,
    redact_url,
)

from ..conftest import STORE_KINDS

pytestmark = pytest.mark.anyio


#: A process that takes a conversation's lock, says so, and holds it until it is killed.
HOLDER = """
import sys, anyio
from dial_runtime.stores import open_store

async def main() -> None:
    async with open_store(sys.argv[1]).lock(sys.argv[2]):
        print("locked", flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the stores wait on threads, processes and servers, which a virtual clock would skip past."""
    return real_clocks


@pytest.fixture(scope="module")
def demo_log() -> tuple[LogEntry, ...]:
    """The log of the shipped demo conversation: many kinds of event, payloads, results, outcomes."""
    conversation = anyio.run(partial(run_demo, write=lambda _: None))
    return conversation.log


@pytest.fixture
def connect(url: str, keep: Callable[[StorePort], StorePort]) -> Callable[[], StorePort]:
    """Opens stores on one backend, each with its own connection (one shared store for ``memory:``, which has no
    other way to share a log)."""
    shared = keep(open_store(url))
    return lambda: shared if url == "memory:" else keep(open_store(url))


def said(seq: int, text: str) -> LogEntry:
    return LogEntry(seq=seq, time=1_700_000_000.0 + seq / 8, event=SaidEvent(text=text))


async def write(store: StorePort, conversation_id: str, entries: tuple[LogEntry, ...] | list[LogEntry]) -> None:
    """Append a log the way a conversation does: a few entries at a time."""
    position = 0
    for size in itertools.cycle((1, 3, 2)):
        if position >= len(entries):
            break
        await store.append(conversation_id, entries[position : position + size], expected_seq=position)
        position += size


async def test_a_real_log_round_trips(connect: Callable[[], StorePort], demo_log: tuple[LogEntry, ...]) -> None:
    assert len({entry.event.type for entry in demo_log}) >= 10
    store = connect()
    await write(store, "demo", demo_log)
    assert await store.read("demo") == list(demo_log)
    assert await connect().read("demo") == list(demo_log)


durable = pytest.mark.parametrize("durable_url", STORE_KINDS[1:], indirect=True)


@durable
async def test_a_log_outlives_its_store(
    durable_url: str, demo_log: tuple[LogEntry, ...], keep: Callable[[StorePort], StorePort]
) -> None:
    first = keep(open_store(durable_url))
    await write(first, "demo", demo_log)
    await first.aclose()
    assert await keep(open_store(durable_url)).read("demo") == list(demo_log)


async def _lock(store: StorePort) -> None:
    async with store.lock("demo"):
        raise AssertionError("a closed store gave its lock")


#: Every call a conversation makes on a store.
STORE_CALLS: dict[str, Callable[[StorePort], Any]] = {
    "append": lambda store: store.append("demo", [said(2, "again")], expected_seq=1),
    "read": lambda store: store.read("demo"),
    "read-after": lambda store: store.read("demo", after_seq=1),
    "conversations": lambda store: store.conversations(),
    "lock": _lock,
}


@pytest.mark.parametrize("call", STORE_CALLS)
async def test_a_closed_store_refuses_every_call(url: str, call: str) -> None:
    store = open_store(url)
    await store.append("demo", [said(1, "hello")], expected_seq=0)
    await store.aclose()
    with pytest.raises(StoreClosed, match="closed"):
        await STORE_CALLS[call](store)
    await store.aclose()  # closing again is harmless


async def test_reads_after_a_seq(connect: Callable[[], StorePort], demo_log: tuple[LogEntry, ...]) -> None:
    store = connect()
    assert await store.read("demo") == []
    await write(store, "demo", demo_log)
    for after in (0, 1, 7, len(demo_log) - 1, len(demo_log), len(demo_log) + 5):
        assert await store.read("demo", after_seq=after) == list(demo_log[after:])
    assert await store.read("other") == []


async def test_a_stale_append_conflicts_and_writes_nothing(connect: Callable[[], StorePort]) -> None:
    store = connect()
    await store.append("c", [said(1, "a"), said(2, "b"), said(3, "c")], expected_seq=0)
    for expected in (0, 2, 4):
        with pytest.raises(StoreConflict) as caught:
            await store.append("c", [said(expected + 1, "x"), said(expected + 2, "y")], expected_seq=expected)
        assert isinstance(caught.value, ConversationBusy)
        with pytest.raises(StoreConflict):
            await store.append("c", [], expected_seq=expected)
    with pytest.raises(StoreConflict):
        await store.append("new", [said(2, "x")], expected_seq=1)
    await store.append("c", [], expected_seq=3)
    assert [entry.event for entry in await store.read("c")] == [SaidEvent(text=t) for t in "abc"]
    assert await store.read("new") == []


async def test_misnumbered_entries_are_refused(connect: Callable[[], StorePort]) -> None:
    store = connect()
    await store.append("c", [said(1, "a")], expected_seq=0)
    for entries in ([said(3, "gap")], [said(2, "b"), said(2, "repeat")], [said(1, "stale")]):
        with pytest.raises(ValueError, match="seq"):
            await store.append("c", entries, expected_seq=1)
    assert await store.read("c") == [said(1, "a")]


@pytest.mark.parametrize("via", ["tasks", "connections"])
async def test_racing_appends_one_wins(connect: Callable[[], StorePort], via: str) -> None:
    first = connect()
    racers = [first if via == "tasks" else connect() for _ in range(6)]
    won: list[int] = []
    lost: list[int] = []
    for round_ in range(8):
        start = anyio.Event()
        last = round_ * 2

        async def race(store: StorePort, racer: int, last: int, start: anyio.Event) -> None:
            await start.wait()
            try:
                await store.append(
                    "c", [said(last + 1, f"{racer}"), said(last + 2, f"{racer}")], expected_seq=last
                )
            except StoreConflict:
                lost.append(racer)
            else:
                won.append(racer)

        async with anyio.create_task_group() as group:
            for racer, store in enumerate(racers):
                group.start_soon(race, store, racer, last, start)
            await anyio.sleep(0.01)
            start.set()
        assert len(won) == round_ + 1
        assert len(lost) == (round_ + 1) * (len(racers) - 1)
    log = await first.read("c")
    assert [entry.seq for entry in log] == list(range(1, 17))
    assert [entry.event for entry in log] == [SaidEvent(text=f"{racer}") for racer in won for _ in range(2)]


async def test_postgres_unique_violation_is_a_conflict(
    pg_schema_url: str, keep: Callable[[StorePort], StorePort]
) -> None:
    """An append that passed its seq check while another inserted the same seq waits for it, then conflicts."""
    store = keep(open_store(pg_schema_url))
    await store.append("c", [said(1, "a")], expected_seq=0)
    rival = await anyio.to_thread.run_sync(partial(psycopg.connect, pg_schema_url))
    try:
        await anyio.to_thread.run_sync(
            rival.execute,
            "INSERT INTO dial_log VALUES ('c', 2, 0, %s)",
            ('{"seq":2,"time":0,"event":{"type":"said","text":"rival"}}',),
        )
        outcome: list[BaseException | None] = []

        async def append() -> None:
            try:
                await store.append("c", [said(2, "mine")], expected_seq=1)
            except StoreConflict as error:
                outcome.append(error)
            else:
                outcome.append(None)

        async with anyio.create_task_group() as group:
            group.start_soon(append)
            with anyio.fail_after(10):
                while not await anyio.to_thread.run_sync(waiting_on_a_lock, pg_schema_url):
                    await anyio.sleep(0.02)
            await anyio.to_thread.run_sync(rival.commit)
        assert isinstance(outcome[0], StoreConflict)
    finally:
        await anyio.to_thread.run_sync(rival.close)
    assert [entry.event for entry in await store.read("c")] == [SaidEvent(text="a"), SaidEvent(text="rival")]


def waiting_on_a_lock(url: str) -> bool:
    """Whether a session of the test database waits for a lock."""
    with psycopg.connect(url, autocommit=True) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] == 1


async def test_a_lock_is_exclusive(connect: Callable[[], StorePort]) -> None:
    store, other = connect(), connect()
    async with store.lock("a"):
        for contender in (store, other):
            with pytest.raises(ConversationBusy, match="'a'"):
                async with contender.lock("a"):
                    pytest.fail("a held conversation was locked again")
        async with other.lock("b"):
            pass
    async with other.lock("a"):
        with pytest.raises(ConversationBusy):
            async with store.lock("a"):
                pass
    with pytest.raises(KeyError):
        async with store.lock("a"):
            raise KeyError("the holder failed")
    async with other.lock("a"):
        pass


@durable
async def test_a_lock_dies_with_its_process(durable_url: str, keep: Callable[[StorePort], StorePort]) -> None:
    store = keep(open_store(durable_url))
    holder = await anyio.open_process(
        [sys.executable, "-c", HOLDER, durable_url, "held"], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2]
    )
    try:
        assert holder.stdout is not None
        said_so = b""
        with anyio.fail_after(20):
            while not said_so.endswith(b"\n"):
                said_so += await holder.stdout.receive()
        assert said_so == b"locked\n"
        with pytest.raises(ConversationBusy):
            async with store.lock("held"):
                pass
        async with store.lock("free"):
            pass
    finally:
        holder.kill()
        await holder.wait()
    assert holder.returncode == -signal.SIGKILL
    with anyio.fail_after(10):
        while True:
            try:
                async with store.lock("held"):
                    break
            except ConversationBusy:
                await anyio.sleep(0.05)  # the server notices a dead client's session a moment later


async def test_conversations_are_listed_sorted(connect: Callable[[], StorePort]) -> None:
    store = connect()
    assert await store.conversations() == []
    ids = ["b", "a", "é", "B", "z-10", "z-9", "😀"]
    for conversation_id in ids:
        await store.append(conversation_id, [said(1, "hi")], expected_seq=0)
    await store.append("b", [said(2, "again")], expected_seq=1)
    await store.append("empty", [], expected_seq=0)
    async with store.lock("only-locked"):
        assert await connect().conversations() == sorted(ids)


async def test_sqlite_runs_in_wal_mode(tmp_path: Path, keep: Callable[[StorePort], StorePort]) -> None:
    path = tmp_path / "logs.db"
    store = keep(open_store(f"sqlite:{path}"))
    await store.append("c", [said(1, "a")], expected_seq=0)
    assert (tmp_path / "logs.db-wal").exists()
    async with store.lock("c"):
        assert list((tmp_path / "logs.db.locks").iterdir()) == [
            tmp_path / "logs.db.locks" / f"{hashlib.sha1(b'c').hexdigest()}.lock"
        ]
    await store.aclose()
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    connection.close()


async def test_sqlite_waits_for_another_writer_off_the_event_loop(
    tmp_path: Path, keep: Callable[[StorePort], StorePort]
) -> None:
    """An append that finds the write lock taken neither fails nor stalls the event loop: it waits in a worker
    thread until the lock is free, then appends."""
    path = tmp_path / "logs.db"
    store = keep(open_store(f"sqlite:{path}"))
    await store.append("c", [said(1, "a")], expected_seq=0)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    appended = anyio.Event()

    async def append() -> None:
        await store.append("c", [said(2, "b")], expected_seq=1)
        appended.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(append)
            ticks = 0
            with anyio.move_on_after(0.3):
                while True:
                    await anyio.sleep(0.01)
                    ticks += 1
            assert not appended.is_set()
            assert ticks >= 10  # the loop ran other tasks all along
            writer.execute("ROLLBACK")
            with anyio.fail_after(10):
                await appended.wait()
    finally:
        writer.close()
    assert await store.read("c") == [said(1, "a"), said(2, "b")]


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:logs.db", "logs.db"),
        ("SQLite:var/logs.db", "var/logs.db"),
        ("sqlite:/var/logs.db", "/var/logs.db"),
        ("sqlite:///var/logs.db", "/var/logs.db"),
    ],
)
def test_open_store_reads_sqlite_urls(url: str, path: str) -> None:
    store = open_store(url)
    assert isinstance(store, SQLiteStore)
    assert store.path == Path(path)


@pytest.mark.parametrize(
    "url", ["postgresql://user@db.example:5432/dial", "postgres://db.example/dial", "postgresql:///d?host=/run/pg"]
)
def test_open_store_reads_postgres_urls(url: str) -> None:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    assert store.url == url


@pytest.mark.parametrize("url", ["memory:", "memory", "MEMORY:"])
def test_open_store_reads_memory_urls(url: str) -> None:
    assert isinstance(open_store(url), MemoryStore)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "memory:x",
        "sqlite:",
        "sqlite://",
        "sqlite://host/logs.db",
        "logs.db",
        "postgresql:/dial",
        "mysql://h/d",
    ],
)
def test_open_store_refuses_other_urls(url: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(url))):
        open_store(url)


def _backup(source: Path, target: Path) -> None:
    """Copy a database with sqlite3's backup API, as an operator's backup tool does: without its lock folder."""
    with sqlite3.connect(source) as original, sqlite3.connect(target) as copy:
        original.backup(copy)
    original.close()
    copy.close()


def _clear_locks(source: Path, target: Path) -> None:
    """Delete the lock folder, as an operator clearing "lock files" does."""
    shutil.rmtree(source.with_name(source.name + ".locks"))
    assert source == target


@pytest.mark.parametrize("lose_locks", [_backup, _clear_locks], ids=["backup-copy", "locks-deleted"])
async def test_sqlite_without_its_lock_folder_reads_the_whole_log(
    tmp_path: Path, keep: Callable[[StorePort], StorePort], demo_log: tuple[LogEntry, ...], lose_locks: Any
) -> None:
    """The lock folder only locks: a database without it (a backup copy, a folder someone cleared) opens with
    its whole log, and a conversation then goes on from there without a conflict or a stale write."""
    source = tmp_path / "logs.db"
    target = tmp_path / ("copy.db" if lose_locks is _backup else "logs.db")
    store = keep(open_store(f"sqlite:{source}"))
    await write(store, "demo", demo_log)
    async with store.lock("demo"):  # a held-and-released lock leaves its lock file behind
        pass
    await store.aclose()
    lose_locks(source, target)
    assert not target.with_name(target.name + ".locks").exists()

    copy = keep(open_store(f"sqlite:{target}"))
    assert await copy.conversations() == ["demo"]
    conversation = await Conversation.open(
        copy, "demo", agent=ScriptedAgent(()), domain=NotesDomain(), human=policy_human("dismiss")
    )
    assert conversation.log == demo_log
    assert await copy.read("demo") == list(demo_log)
    await copy.append("demo", [said(len(demo_log) + 1, "more")], expected_seq=len(demo_log))
    assert len(await keep(open_store(f"sqlite:{target}")).read("demo")) == len(demo_log) + 1


@pytest.mark.parametrize(
    "content",
    [b"not a database, only some text\n", b"SQLite format 3\x00" + b"\xff" * 200, bytes(range(256)) * 64],
    ids=["text", "truncated", "binary"],
)
async def test_sqlite_refuses_a_file_that_is_not_a_database(
    tmp_path: Path, keep: Callable[[StorePort], StorePort], content: bytes
) -> None:
    """A file that is not a database is refused by the store's first call, before anything is written, with a
    StoreError naming the path; the file is left as it was."""
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    for create in (True, False):
        store = keep(open_store(f"sqlite:{path}", create=create))
        for call in (store.read("c"), store.conversations(), store.append("c", [said(1, "a")], expected_seq=0)):
            with pytest.raises(StoreError, match=re.escape(str(path))):
                await call
    assert path.read_bytes() == content
    assert not (tmp_path / "notes.txt.locks").exists() or not list((tmp_path / "notes.txt.locks").iterdir())


async def test_sqlite_in_a_missing_folder_is_refused_and_nothing_is_made(
    tmp_path: Path, keep: Callable[[StorePort], StorePort]
) -> None:
    path = tmp_path / "no" / "such" / "logs.db"
    store = keep(open_store(f"sqlite:{path}"))
    with pytest.raises(StoreError, match=re.escape(str(path.parent))):
        await store.read("c")
    with pytest.raises(StoreError, match="does not exist"):
        async with store.lock("c"):
            pass
    assert not (tmp_path / "no").exists()


async def test_a_read_only_store_creates_nothing(tmp_path: Path, keep: Callable[[StorePort], StorePort]) -> None:
    """``create=False`` (what ``log``, ``export``, ``replay`` and ``list`` open): a missing file is an error, and
    an existing database gains no table, no write-ahead log and no lock file."""
    missing = tmp_path / "typo.db"
    with pytest.raises(StoreError, match="no such database file"):
        await keep(open_store(f"sqlite:{missing}", create=False)).read("c")
    assert list(tmp_path.iterdir()) == []

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    before = empty.read_bytes()
    store = keep(open_store(f"sqlite:{empty}", create=False))
    assert await store.read("c") == [] and await store.conversations() == []
    await store.aclose()
    assert empty.read_bytes() == before and sorted(path.name for path in tmp_path.iterdir()) == ["empty.db"]

    full = tmp_path / "logs.db"
    writer = keep(open_store(f"sqlite:{full}"))
    await writer.append("c", [said(1, "a")], expected_seq=0)
    await writer.aclose()
    reader = keep(open_store(f"sqlite:{full}", create=False))
    assert await reader.read("c") == [said(1, "a")]
    assert await reader.conversations() == ["c"]


async def test_a_read_only_postgres_store_creates_no_table(
    pg_schema_url: str, keep: Callable[[StorePort], StorePort]
) -> None:
    store = keep(open_store(pg_schema_url, create=False))
    assert await store.read("c") == [] and await store.conversations() == []
    with psycopg.connect(pg_schema_url) as connection:
        assert connection.execute("SELECT to_regclass('dial_log')").fetchone() == (None,)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://ann:s3cret@db.example/dial", "postgresql://ann:***@db.example/dial"),
        (
            "postgres://ann:p%40ss@db.example:5433/d?sslmode=require",
            "postgres://ann:***@db.example:5433/d?sslmode=require",
        ),
        (
            "postgresql:///d?host=/run/pg&password=s3cret&user=ann",
            "postgresql:///d?host=/run/pg&password=***&user=ann",
        ),
        ("postgresql://ann@db.example/dial", "postgresql://ann@db.example/dial"),
        ("sqlite:logs.db", "sqlite:logs.db"),
    ],
)
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


async def test_a_refused_postgres_connection_is_one_store_error_without_the_password(
    keep: Callable[[StorePort], StorePort], tmp_path: Path
) -> None:
    """No server listens on the socket folder: the error names the URL, password masked."""
    store = keep(open_store(f"postgresql://ann:s3cret@/dial?host={tmp_path}&connect_timeout=2"))
    with pytest.raises(StoreError) as raised:
        await store.read("c")
    assert "s3cret" not in str(raised.value) and "ann:***@" in str(raised.value)
    assert "\n" not in str(raised.value)


# --- watching for appends ----------------------------------------------------------------------------------------

#: The longest a watcher may take to hear of an append (by another connection: SQLite polls its data_version).
HEARD_WITHIN = 5.0


async def next_change(changes: AsyncIterator[str | None]) -> str | None:
    with anyio.fail_after(HEARD_WITHIN):
        return await anext(changes)


async def quiet(changes: AsyncIterator[str | None], *, wait: float = 0.3) -> bool:
    """Whether no change comes within ``wait`` seconds."""
    with anyio.move_on_after(wait):
        await anext(changes)
        return False
    return True


async def test_a_watch_hears_an_append_by_another_connection(connect: Callable[[], StorePort]) -> None:
    watching, writing = connect(), connect()
    async with watching.watch("c1") as changes:
        assert await watching.read("c1") == []
        await writing.append("c2", [said(1, "elsewhere")], expected_seq=0)
        await writing.append("c1", [said(1, "hello")], expected_seq=0)
        assert await next_change(changes) == "c1"
        assert [entry.seq for entry in await watching.read("c1")] == [1]
        await writing.append("c1", [said(2, "again")], expected_seq=1)
        assert await next_change(changes) == "c1"


async def test_the_first_watch_of_a_fresh_store_hears_an_append_made_at_once(
    connect: Callable[[], StorePort],
) -> None:
    """A watch hears every append committed after it was entered, even when it is the store's first and the
    append follows at once (PostgreSQL: the watch is entered only once its listener is listening)."""
    writing = connect()
    await writing.read("warm")  # the writer's connection is open: its append follows the watch at once
    for attempt in range(1, 6):
        conversation = f"fresh-{attempt}"
        async with connect().watch(conversation) as changes:
            await writing.append(conversation, [said(1, "at once")], expected_seq=0)
            assert await next_change(changes) == conversation


async def test_a_postgres_listener_that_lost_its_connection_wakes_every_watcher_and_listens_again(
    pg_schema_url: str, keep: Callable[[StorePort], StorePort]
) -> None:
    """Notifications sent while the listener reconnects are gone: a watcher is told any conversation may have
    changed (``None``), then hears appends as before."""
    watching, writing = keep(open_store(pg_schema_url)), keep(open_store(pg_schema_url))
    await writing.read("warm")

    def end_the_listeners_session() -> int:
        with psycopg.connect(pg_schema_url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN dial_log'"
            ).fetchone()
        return int(ended[0]) if ended else 0

    async with watching.watch() as changes:
        assert await anyio.to_thread.run_sync(end_the_listeners_session) == 1
        assert await next_change(changes) is None
        await writing.append("c1", [said(1, "heard again")], expected_seq=0)
        assert await next_change(changes) == "c1"


async def test_appends_while_the_watcher_is_busy_come_once(url: str, connect: Callable[[], StorePort]) -> None:
    store = connect()
    async with store.watch() as changes:
        for seq in (1, 2, 3):
            await store.append("a", [said(seq, "x")], expected_seq=seq - 1)
        await store.append("b", [said(1, "y")], expected_seq=0)
        seen: list[str | None] = []
        while "b" not in seen:
            seen.append(await next_change(changes))
        if url.startswith("postgresql"):  # notifications arrive as they come: some may be taken one by one
            assert set(seen) == {"a", "b"} and len(seen) <= 4
        else:
            assert seen == ["a", "b"]
        assert await quiet(changes)


async def test_a_refused_append_wakes_nobody(connect: Callable[[], StorePort]) -> None:
    watching, writing = connect(), connect()
    await writing.append("c1", [said(1, "hello")], expected_seq=0)
    async with watching.watch("c1") as changes:
        with pytest.raises(StoreConflict):
            await writing.append("c1", [said(1, "late")], expected_seq=0)
        assert await quiet(changes)


async def test_a_watch_ends_when_its_store_closes(url: str) -> None:
    store = open_store(url)
    async with store.watch("c1") as changes:
        await store.aclose()
        with anyio.fail_after(HEARD_WITHIN):
            assert [change async for change in changes] == []
    with pytest.raises(StoreClosed):
        store.watch("c1")


async def test_postgres_wakes_a_watch_of_every_conversation_from_any_connection(
    pg_schema_url: str, keep: Callable[[StorePort], StorePort]
) -> None:
    watching, writing = keep(open_store(pg_schema_url)), keep(open_store(pg_schema_url))
    async with watching.watch() as changes:
        await writing.append("x" * 10_000, [said(1, "a long id")], expected_seq=0)
        assert await next_change(changes) is None  # too long for a notification: any may have changed
        await writing.append("b", [said(1, "hi")], expected_seq=0)
        assert await next_change(changes) == "b"
