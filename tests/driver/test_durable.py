"""Durable conversations: a stored conversation outlives its store object and its process, survives a SIGKILL at
every step of a turn, takes a decision in another process, and is never driven by two workers at once.

The in-process tests run over the three stores on trio and asyncio. The tests with child processes
(``tests.crash_child``) run over SQLite and PostgreSQL, each with the test on one backend and the child on the
other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from dial_runtime import (
    Accept,
    AlreadyDecided,
    Conversation,
    ConversationBusy,
    Defer,
    Dismiss,
    policy_human,
    scripted_human,
)
from dial_runtime.decisions.deadlines import conversation_opener
from dial_runtime.decisions.inbox import BulkChoice, Inbox, decide_each
from dial_runtime.runtime.core import UNKNOWN_EFFECT
from dial_runtime.runtime.events import LogEntry, SaidEvent
from dial_runtime.runtime.records import payload_digest
from dial_runtime.runtime.state import ConversationState
from dial_runtime.stores import StorePort, open_store

from ..crash_child import INSTEAD, OK, ONE, RACE_SAYS, FileNotes
from ..fakes import Agent, Notes, envelope, suggest

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]
OTHER = {"trio": "asyncio", "asyncio": "trio"}

#: Each durable store, with the backend the test runs on (its child runs on the other).
ACROSS_PROCESSES = pytest.mark.parametrize(
    ("durable_url", "anyio_backend"), [("sqlite", "trio"), ("postgres", "asyncio")], indirect=["durable_url"]
)

#: A fact, a suggestion the person dismisses, and one they defer.
FIRST_REPLY = envelope(
    '<dial-declare context-key="topic">"groceries"</dial-declare>',
    suggest("add-note", '{"text":"a"}'),
    suggest("add-note", '{"text":"b"}'),
)


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the stores wait on threads, processes and servers, which a virtual clock would skip past."""
    return real_clocks


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[str], StorePort]]:
    """Opens a new store object for a URL each time (one shared object for ``memory:``, which cannot share a log
    otherwise), and closes them all when the test ends."""
    opened: list[StorePort] = []
    memory = open_store("memory:")

    def new(url: str) -> StorePort:
        if url == "memory:":
            return memory
        opened.append(open_store(url))
        return opened[-1]

    yield new
    for store in opened:
        await store.aclose()


@pytest.fixture
def conversation_id() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def runs(tmp_path: Path) -> FileNotes:
    """The file-backed domain; every process that runs an action appends to the same file."""
    return FileNotes(tmp_path / "runs")


def checked(log: Sequence[LogEntry]) -> ConversationState:
    """Check a stored log (seqs 1..N, it folds, no suggestion has two outcomes or an outcome without a proposal)
    and return the state it folds to."""
    assert [entry.seq for entry in log] == list(range(1, len(log) + 1))
    state = ConversationState.fold(entry.event for entry in log)
    proposed = [entry.event.id for entry in log if entry.event.type == "proposed"]
    outcomes = [entry.event.id for entry in log if entry.event.type == "outcome"]
    assert len(set(proposed)) == len(proposed)
    assert sorted(outcomes) == sorted(set(proposed) - set(state.open_suggestions))
    return state


def told(sent: list[str], text: str) -> int:
    """How many times the agent was told ``text`` over all its messages."""
    return sum(message.count(text) for message in sent)


def statuses(outcomes: Sequence[Any]) -> list[tuple[str, str]]:
    return [(outcome.id, outcome.status) for outcome in outcomes]


def ran(runs: FileNotes) -> list[str]:
    """The notes whose action ran, in every process, in order."""
    return [line.split()[0] for line in runs.ran()]


class Child:
    """A ``tests.crash_child`` process, read line by line with bounded waits."""

    def __init__(self, process: Process) -> None:
        assert process.stdout is not None
        self.process = process
        self.stdout = BufferedByteReceiveStream(process.stdout)

    async def line(self) -> str:
        """The child's next line, without its newline (within 10 s); fails with its errors if it exits first."""
        try:
            with anyio.fail_after(10):
                return (await self.stdout.receive_until(b"\n", 1 << 20)).decode()
        except (anyio.IncompleteRead, anyio.EndOfStream):
            await self.process.wait()
            pytest.fail(f"the child exited with {self.process.returncode}:\n{await self.errors()}")

    async def errors(self) -> str:
        assert self.process.stderr is not None
        text = b""
        with anyio.fail_after(10):
            async for chunk in self.process.stderr:
                text += chunk
        return text.decode(errors="replace")

    async def result(self) -> Any:
        """The JSON line the child prints last; it must then exit cleanly."""
        printed = json.loads(await self.line())
        with anyio.fail_after(10):
            await self.process.wait()
        assert self.process.returncode == 0, await self.errors()
        return printed

    async def kill(self) -> None:
        """SIGKILL the child where it stands."""
        self.process.kill()
        with anyio.fail_after(10):
            await self.process.wait()
        assert self.process.returncode == -signal.SIGKILL


@asynccontextmanager
async def child(step: str, backend: str, url: str, conversation_id: str, runs: FileNotes) -> AsyncIterator[Child]:
    command = [sys.executable, "-m", "tests.crash_child", step, backend, url, conversation_id, str(runs.runs)]
    pipe = subprocess.PIPE
    process = await anyio.open_process(command, stdin=pipe, stdout=pipe, stderr=pipe, cwd=ROOT)
    try:
        yield Child(process)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


async def crash(
    step: str, backend: str, url: str, conversation_id: str, runs: FileNotes, store: StorePort
) -> list[LogEntry]:
    """Run a child to ``step`` of a turn, SIGKILL it there, and return the log it left.

    The child dies holding the conversation's lock: the tests open the conversation right after, without waiting.
    """
    async with child(step, OTHER[backend], url, conversation_id, runs) as process:
        assert await process.line() == "ready"
        await process.kill()
    left = await store.read(conversation_id)
    assert checked(left).life == "in_turn"
    return left


async def test_a_reopened_conversation_carries_on(
    url: str, connect: Callable[[str], StorePort], conversation_id: str
) -> None:
    first = await Conversation.open(
        connect(url),
        conversation_id,
        agent=Agent([FIRST_REPLY]),
        domain=Notes(),
        human=scripted_human(["dismiss", "defer"]),
    )
    assert (first.log, first.facts, first.owed, first.pending, first.ended) == ((), {}, (), (), False)
    result = await first.say("go")
    assert result.status == "awaiting"

    agent, domain = Agent([envelope(suggest("add-note", '{"text":"c"}')), OK, OK]), Notes()
    again = await Conversation.open(
        connect(url), conversation_id, agent=agent, domain=domain, human=policy_human()
    )
    assert again.log == first.log
    assert again.facts == first.facts == {"topic": "groceries"}
    assert again.owed == first.owed and statuses(again.owed) == [("sg-1", "dismissed")]
    assert again.pending == first.pending and [p.id for p in again.pending] == ["sg-2"]

    later = await again.decide("sg-2", Accept(), by="ada")
    assert (later.status, later.turns) == ("idle", 3)  # turns count on from the say
    assert statuses(later.outcomes) == [("sg-2", "done"), ("sg-3", "done")]
    assert domain.ran == [("add-note", {"text": "b"}), ("add-note", {"text": "c"})]
    await again.say("thanks")
    sent = agent.sent
    assert "sg-1:dismissed" in sent[0] and "sg-2:done" in sent[0] and "sg-3:done" in sent[1]
    assert "yield=" not in sent[2] and sent[2].endswith("thanks")
    assert [told(sent, text) for text in ("sg-1:dismissed", "sg-2:done", "sg-3:done")] == [1, 1, 1]

    stored = await connect(url).read(conversation_id)
    assert stored == list(again.log)
    assert checked(stored).owed_outcomes == ()
    assert (await first.say("")).status == "idle"  # the first object catches up before it writes
    assert list(first.log) == await connect(url).read(conversation_id)
    assert first.log[: len(stored)] == tuple(stored) and first.facts == again.facts


async def test_a_second_driver_or_holder_is_turned_away_while_one_drives(
    url: str, connect: Callable[[str], StorePort], conversation_id: str
) -> None:
    arrived, release = anyio.Event(), anyio.Event()

    async def held(message: str) -> str:
        arrived.set()
        await release.wait()
        return OK

    def opened(agent: Agent) -> Conversation:
        return Conversation(
            agent=agent,
            domain=Notes(),
            human=policy_human(),
            store=connect(url),
            conversation_id=conversation_id,
        )

    first, second = opened(Agent([held])), opened(Agent([OK]))
    async with anyio.create_task_group() as group:
        group.start_soon(first.say, "one")
        with anyio.fail_after(10):
            await arrived.wait()
        with pytest.raises(ConversationBusy):
            await second.say("two")
        with pytest.raises(ConversationBusy):
            await second.resume()
        with pytest.raises(ConversationBusy):
            async with second.holding():
                pass
        with pytest.raises(ConversationBusy):
            await Conversation.open(
                connect(url), conversation_id, agent=Agent([]), domain=Notes(), human=policy_human()
            )
        assert second.log == ()
        release.set()
    async with second.holding():  # reads what the first stored meanwhile
        assert [entry.event.type for entry in second.log].count("said") == 1
    assert (await second.say("two")).status == "idle"
    stored = await connect(url).read(conversation_id)
    checked(stored)
    assert [entry.event.text for entry in stored if entry.event.type == "said"] == ["one", "two"]
    assert list(second.log) == stored and first.log == second.log[: len(first.log)]


TWO_CARDS = envelope(suggest("add-note", '{"text":"a"}'), suggest("add-note", '{"text":"b"}'))


async def test_calls_made_within_holding_have_nobody_between_them(
    url: str, connect: Callable[[str], StorePort], conversation_id: str
) -> None:
    """Another worker's decision between two of the holder's calls is turned away, so what the holder checked
    before its first call still holds for its second; once the block ends, the other worker's call is taken."""

    def opened(*replies: str) -> Conversation:
        return Conversation(
            agent=Agent(list(replies)),
            domain=Notes(),
            human=scripted_human([Defer(), Defer()]),
            store=connect(url),
            conversation_id=conversation_id,
        )

    holder, other = opened(TWO_CARDS, OK), opened()
    assert (await holder.say("two notes")).status == "awaiting"
    async with holder.holding():
        assert [each.id for each in holder.pending] == ["sg-1", "sg-2"]
        assert (await holder.decide("sg-1", Accept())).status == "awaiting"
        with pytest.raises(ConversationBusy):
            await other.decide("sg-2", Dismiss())
        with pytest.raises(ConversationBusy):
            async with holder.holding():  # held already
                pass
        assert (await holder.decide("sg-2", Accept())).status == "idle"  # both ran: the agent answered
    with pytest.raises(AlreadyDecided):
        await other.decide("sg-2", Dismiss())
    stored = await connect(url).read(conversation_id)
    assert [entry.event.status for entry in stored if entry.event.type == "outcome"] == ["done", "done"]
    assert (await other.say("")).status == "idle"  # the conversation is free again


ASKED = envelope('<dial-ask id="q">Which list?</dial-ask>')


class StoredWhenAsked:
    """A person who, as each question reaches them, notes the types of the events the store holds."""

    def __init__(self, store: StorePort, conversation_id: str, *, waits: bool) -> None:
        self.store, self.conversation_id, self.waits = store, conversation_id, waits
        self.stored: list[list[str]] = []

    def _answer(self, reply: Any) -> Any:
        if not self.waits:
            return reply

        async def later() -> Any:
            self.stored.append([entry.event.type for entry in await self.store.read(self.conversation_id)])
            return reply

        return later()

    def decide(self, suggestion: Any) -> Any:
        return self._answer(Accept())

    def answer(self, ask: Any) -> Any:
        return self._answer("groceries")


@pytest.mark.parametrize("reply", [FIRST_REPLY, ASKED], ids=["decide", "answer"])
@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-deadline", "deadline"])
async def test_the_log_is_stored_before_the_person_is_awaited(
    url: str, connect: Callable[[str], StorePort], conversation_id: str, reply: str, timeout: float | None
) -> None:
    """A question the person takes time over is stored first; a plain function's instant reply is stored with
    what follows it. Either way the call ends with everything stored."""
    store = connect(url)
    waiting = StoredWhenAsked(store, conversation_id, waits=True)
    conversation = await Conversation.open(
        store, conversation_id, agent=Agent([reply, OK, OK]), domain=Notes(), human=waiting, decide_timeout=timeout
    )
    await conversation.say("go")
    asked = "suggestion" if reply == FIRST_REPLY else "ask"
    assert waiting.stored and all(types[-1] == asked for types in waiting.stored)
    assert await store.read(conversation_id) == list(conversation.log)

    other = f"{conversation_id}-plain"
    instant = StoredWhenAsked(store, other, waits=False)
    plain = await Conversation.open(store, other, agent=Agent([reply, OK, OK]), domain=Notes(), human=instant)
    await plain.say("go")
    assert await store.read(other) == list(plain.log)
    assert [e.event.type for e in plain.log] == [e.event.type for e in conversation.log]


async def test_an_ending_between_calls_is_stored_after_another_workers_call(
    url: str, connect: Callable[[str], StorePort], conversation_id: str
) -> None:
    """``end()`` between calls is written with the object's next call, even when another worker wrote since."""

    def opened() -> Awaitable[Conversation]:
        return Conversation.open(
            connect(url), conversation_id, agent=Agent([OK]), domain=Notes(), human=policy_human()
        )

    here, there = await opened(), await opened()
    assert (await there.say("hello")).status == "idle"
    here.end()
    result = await here.say("more")
    assert result.status == "ended"
    stored = await connect(url).read(conversation_id)
    checked(stored)
    assert [entry.event.type for entry in stored].count("ended") == 1 and list(here.log) == stored
    assert (await opened()).ended


class FailingOnce:
    """A store whose ``fail_at``-th append raises (the write never reached the store), like a dropped
    connection; everything else goes to the real store."""

    def __init__(self, store: StorePort, fail_at: int) -> None:
        self._store = store
        self._appends = 0
        self._fail_at = fail_at

    async def append(self, conversation_id: str, entries: Sequence[LogEntry], *, expected_seq: int) -> None:
        self._appends += 1
        if self._appends == self._fail_at:
            raise OSError("the connection to the store was lost")
        await self._store.append(conversation_id, entries, expected_seq=expected_seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_worker_whose_write_failed_never_replays_its_events_over_another_workers_log(
    url: str, connect: Callable[[str], StorePort], conversation_id: str
) -> None:
    """The write before the action fails: that worker's unwritten events are dropped, the next worker's call
    stands, and the first worker's next call reads the store again instead of recording them a second time."""
    failing = FailingOnce(connect(url), fail_at=2)  # 1: before the send, 2: before the action
    here = await Conversation.open(
        failing,
        conversation_id,
        agent=Agent([ONE, OK]),
        domain=Notes(),
        human=policy_human(),  # type: ignore[arg-type]
    )
    with pytest.raises(OSError, match="connection to the store was lost"):
        await here.say("go")
    there = await Conversation.open(
        connect(url), conversation_id, agent=Agent([OK]), domain=Notes(), human=policy_human()
    )
    assert (await there.say("hello")).status == "idle"
    later_agent = Agent([OK])
    here.agent = later_agent
    assert (await here.say("more")).status == "idle"
    stored = await connect(url).read(conversation_id)
    checked(stored)
    assert list(here.log) == stored
    proposed = [entry.event.id for entry in stored if entry.event.type == "proposed"]
    outcomes = [(entry.event.id, entry.event.status) for entry in stored if entry.event.type == "outcome"]
    assert proposed == [] and outcomes == []  # the proposal was never written: no worker saw it
    assert all("sg-1" not in message for message in later_agent.sent)


def test_a_stored_conversation_takes_no_log_of_its_own() -> None:
    with pytest.raises(TypeError, match="log comes from its store"):
        Conversation(
            agent=Agent([]),
            domain=Notes(),
            human=policy_human(),
            store=open_store("memory:"),
            conversation_id="c",
            log=[LogEntry(seq=1, time=1.0, event=SaidEvent(text="hi"))],
        )


@ACROSS_PROCESSES
async def test_a_decision_deferred_in_one_process_is_taken_in_another(
    durable_url: str,
    anyio_backend: str,
    connect: Callable[[str], StorePort],
    conversation_id: str,
    runs: FileNotes,
) -> None:
    agent = Agent([ONE, OK])
    here = await Conversation.open(
        connect(durable_url), conversation_id, agent=agent, domain=runs, human=scripted_human(["defer"])
    )
    result = await here.say("go")
    assert result.status == "awaiting" and [p.id for p in result.pending] == ["sg-1"]

    async with child("decide-later", OTHER[anyio_backend], durable_url, conversation_id, runs) as there:
        done = await there.result()
    assert (done["status"], done["turns"], done["outcomes"]) == ("idle", 2, [["sg-1", "done"]])
    (message,) = done["sent"]
    assert "sg-1:done" in message
    ((note, pid),) = [line.split() for line in runs.ran()]
    assert note == "a" and int(pid) != os.getpid()

    later = await here.say("more")  # the proposing process catches up: the outcome was delivered over there
    assert later.status == "idle" and len(agent.sent) == 2
    assert "yield=" not in agent.sent[1] and agent.sent[1].endswith("more")
    stored = await connect(durable_url).read(conversation_id)
    assert list(here.log) == stored
    decided = [entry.event for entry in stored if entry.event.type == "decided"]
    assert [(event.decision, event.by) for event in decided] == [("accept", "b")]
    seen = await Conversation.open(
        connect(durable_url), conversation_id, agent=Agent([]), domain=runs, human=scripted_human([])
    )
    assert seen.log == here.log and (seen.owed, seen.pending) == ((), ())
    assert checked(stored).owed_outcomes == ()


@ACROSS_PROCESSES
async def test_killed_after_the_send(
    durable_url: str,
    anyio_backend: str,
    connect: Callable[[str], StorePort],
    conversation_id: str,
    runs: FileNotes,
) -> None:
    store = connect(durable_url)
    left = await crash("send", anyio_backend, durable_url, conversation_id, runs, store)
    assert left[-1].event.type == "sent" and left[-1].event.message.endswith(INSTEAD)

    agent = Agent([OK, OK])
    conversation = await Conversation.open(store, conversation_id, agent=agent, domain=runs, human=policy_human())
    assert conversation.log[: len(left)] == tuple(left)
    assert [entry.event.type for entry in conversation.log[len(left) :]] == ["interrupted", "finished"]
    assert statuses(conversation.owed) == [("sg-1", "superseded"), ("sg-2", "superseded")]
    assert conversation.pending == ()

    await conversation.say("third")
    await conversation.say("fourth")
    assert all(text in agent.sent[0] for text in ("sg-1:superseded", "sg-2:superseded", INSTEAD, "third"))
    assert [told(agent.sent, text) for text in ("sg-1:", "sg-2:", INSTEAD)] == [1, 1, 1]
    assert agent.sent[1].endswith("fourth") and ran(runs) == []
    stored = await connect(durable_url).read(conversation_id)
    assert stored == list(conversation.log)
    checked(stored)


@ACROSS_PROCESSES
async def test_killed_while_the_person_decides(
    durable_url: str,
    anyio_backend: str,
    connect: Callable[[str], StorePort],
    conversation_id: str,
    runs: FileNotes,
) -> None:
    store = connect(durable_url)
    left = await crash("decide", anyio_backend, durable_url, conversation_id, runs, store)
    assert (left[-1].event.type, left[-1].event.id) == ("suggestion", "sg-2")
    assert ran(runs) == ["a"]

    agent = Agent([OK, OK])
    conversation = await Conversation.open(store, conversation_id, agent=agent, domain=runs, human=policy_human())
    assert conversation.log[: len(left)] == tuple(left)
    assert [p.id for p in conversation.pending] == ["sg-2"]
    assert statuses(conversation.owed) == [("sg-1", "done")]

    result = await conversation.decide("sg-2", Accept(), by="ada")
    assert (result.status, result.turns, statuses(result.outcomes)) == ("idle", 2, [("sg-2", "done")])
    await conversation.say("more")
    assert "sg-1:done" in agent.sent[0] and "sg-2:done" in agent.sent[0]
    assert [told(agent.sent, text) for text in ("sg-1:", "sg-2:")] == [1, 1]
    assert ran(runs) == ["a", "b"]
    stored = await connect(durable_url).read(conversation_id)
    assert stored == list(conversation.log)
    assert checked(stored).owed_outcomes == ()


@ACROSS_PROCESSES
@pytest.mark.parametrize("then", ["resume", "say"])
async def test_killed_inside_the_action(
    durable_url: str,
    anyio_backend: str,
    connect: Callable[[str], StorePort],
    conversation_id: str,
    runs: FileNotes,
    then: str,
) -> None:
    store = connect(durable_url)
    left = await crash("run", anyio_backend, durable_url, conversation_id, runs, store)
    assert (left[-1].event.type, left[-1].event.suggestion_id) == ("action-started", "sg-1")
    assert ran(runs) == ["a"]

    agent = Agent([OK, OK])
    conversation = await Conversation.open(store, conversation_id, agent=agent, domain=runs, human=policy_human())
    assert conversation.log[: len(left)] == tuple(left)
    (interrupted,) = conversation.owed
    assert (interrupted.id, interrupted.status, interrupted.code) == ("sg-1", "failed", "interrupted")
    assert interrupted.hint == UNKNOWN_EFFECT
    assert conversation.pending == ()

    if then == "resume":
        result = await conversation.resume()
        assert (result.status, statuses(result.outcomes)) == ("idle", [("sg-2", "done")])
        assert "sg-1:failed" in agent.sent[0] and "sg-2:done" in agent.sent[0]
        assert ran(runs) == ["a", "b"]
    else:
        result = await conversation.say("next")  # new words supersede the rest of the reply
        outcomes = [entry.event for entry in conversation.log[len(left) :] if entry.event.type == "outcome"]
        assert result.status == "idle" and statuses(outcomes) == [("sg-1", "failed"), ("sg-2", "superseded")]
        assert all(text in agent.sent[0] for text in ("sg-1:failed", "sg-2:superseded", "next"))
        assert ran(runs) == ["a"]
    await conversation.say("more")
    assert [told(agent.sent, text) for text in ("sg-1:", "sg-2:")] == [1, 1]
    assert agent.sent[1].endswith("more") and "yield=" not in agent.sent[1]
    stored = await connect(durable_url).read(conversation_id)
    assert stored == list(conversation.log)
    assert checked(stored).owed_outcomes == ()


@ACROSS_PROCESSES
async def test_killed_before_the_report(
    durable_url: str,
    anyio_backend: str,
    connect: Callable[[str], StorePort],
    conversation_id: str,
    runs: FileNotes,
) -> None:
    store = connect(durable_url)
    left = await crash("report", anyio_backend, durable_url, conversation_id, runs, store)
    assert (left[-1].event.type, left[-1].event.turn) == ("sent", 2)
    assert "sg-1:done" in left[-1].event.message
    assert ran(runs) == ["a"]

    agent = Agent([OK, OK])
    conversation = await Conversation.open(store, conversation_id, agent=agent, domain=runs, human=policy_human())
    assert [entry.event.type for entry in conversation.log[len(left) :]] == ["interrupted", "finished"]
    assert statuses(conversation.owed) == [("sg-1", "done")]

    await conversation.say("again")
    await conversation.say("more")
    assert "sg-1:done" in agent.sent[0] and agent.sent[0].endswith("again")
    assert told(agent.sent, "sg-1:") == 1 and agent.sent[1].endswith("more")
    assert ran(runs) == ["a"]
    stored = await connect(durable_url).read(conversation_id)
    assert stored == list(conversation.log)
    assert checked(stored).owed_outcomes == ()


@ACROSS_PROCESSES
async def test_two_processes_racing_for_one_conversation(
    durable_url: str,
    anyio_backend: str,
    connect: Callable[[str], StorePort],
    conversation_id: str,
    runs: FileNotes,
) -> None:
    backend = OTHER[anyio_backend]
    async with (
        child("race", backend, durable_url, conversation_id, runs) as one,
        child("race", backend, durable_url, conversation_id, runs) as two,
    ):
        assert [await one.line(), await two.line()] == ["ready", "ready"]
        for each in (one, two):
            assert each.process.stdin is not None
            await each.process.stdin.send(b"go\n")
        counts = [await one.result(), await two.result()]
    assert [count["done"] for count in counts] == [RACE_SAYS, RACE_SAYS]
    assert [count["conflicts"] for count in counts] == [0, 0], "a write got past the lock"
    assert sum(count["busy"] for count in counts) > 0, "the lock never refused the other worker"

    total = 2 * RACE_SAYS
    stored = await connect(durable_url).read(conversation_id)
    state = checked(stored)
    assert state.owed_outcomes == () and state.open_suggestions == {}
    events = [entry.event for entry in stored]
    assert sum(event.type == "said" for event in events) == total
    expected = [f"sg-{n}" for n in range(1, total + 1)]
    assert [event.id for event in events if event.type == "proposed"] == expected
    assert [(event.id, event.status) for event in events if event.type == "outcome"] == [
        (ident, "done") for ident in expected
    ]
    assert sum(event.type == "sent" for event in events) == 2 * total
    assert len(runs.ran()) == total and len({line.split()[1] for line in runs.ran()}) == 2


@ACROSS_PROCESSES
async def test_a_bulk_killed_midway_and_sent_again_decides_each_card_once(
    durable_url: str, anyio_backend: str, connect: Callable[[str], StorePort], runs: FileNotes
) -> None:
    store = connect(durable_url)
    texts = ["n0", "n1", "n2", "n3", "n4"]
    for text in texts:
        proposing = await Conversation.open(
            store,
            f"bulk-{text}",
            agent=Agent([envelope(suggest("add-note", json.dumps({"text": text})))]),
            domain=runs,
            human=scripted_human(["defer"]),
        )
        assert (await proposing.say("go")).status == "awaiting"
    async with child("bulk", OTHER[anyio_backend], durable_url, "n2", runs) as process:
        assert await process.line() == "ready"  # inside the run of n2: n0 and n1 are decided and done
        await process.kill()
    assert ran(runs) == ["n0", "n1", "n2"]

    cards = await Inbox(store).waiting()
    assert sorted(card.conversation for card in cards) == ["bulk-n3", "bulk-n4"]
    everything = [
        BulkChoice(
            conversation=f"bulk-{text}",
            id="sg-1",
            decision="accept",
            digest=payload_digest("add-note", {"text": text}),
        )
        for text in texts
    ]
    opener = conversation_opener(store, agent=lambda *_: Agent([OK]), domain=runs)
    outcomes = await decide_each(everything, open_conversation=opener, by="b")
    assert [(each.conversation, each.refused) for each in outcomes] == [
        ("bulk-n0", "already-decided"),
        ("bulk-n1", "already-decided"),
        ("bulk-n2", "already-decided"),
        ("bulk-n3", None),
        ("bulk-n4", None),
    ]
    assert sorted(ran(runs)) == texts  # n3 and n4 in either order: their conversations are decided at once
    for text in texts:
        log = await store.read(f"bulk-{text}")
        assert [entry.event.by for entry in log if entry.event.type == "decided"] == ["b"]
        checked(log)
    assert await Inbox(store).waiting() == []
