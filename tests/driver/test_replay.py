"""Replaying recorded conversations, their JSON Lines form, and the log, replay, export and import commands.

The recordings in ``tests/recordings/`` are the logs of real conversations held by the ``record_*`` functions
below; regenerate them with ``python -m tests.driver.test_replay`` (from the repository root) after a deliberate
change of behaviour, and review the diff.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import trio
import trio.testing

from dial_runtime import Accept, AgentError, Conversation, Defer, Dismiss, Edit, LogEntry, Suggestion
from dial_runtime.agents import ScriptedAgent
from dial_runtime.cli import main
from dial_runtime.cli.log import audit_line
from dial_runtime.demo import DECISIONS, SCRIPT, NotesDomain, run_demo
from dial_runtime.driver.replay import Divergence, replay
from dial_runtime.errors import LogError, TokenLimitReached
from dial_runtime.language.records import Option
from dial_runtime.runtime.events import (
    AskEvent,
    DeclareEvent,
    DelegateEvent,
    InformEvent,
    OutcomeEvent,
    ReplyCutEvent,
    ReplyEvent,
    SaidEvent,
    TurnLimitEvent,
    event_to_dict,
)
from dial_runtime.runtime.records import Ask
from dial_runtime.stores import MemoryStore, open_store
from dial_runtime.stores.jsonl import export_jsonl, import_jsonl

from ..fakes import Agent, StreamingAgent, envelope, hang, suggest

RECORDINGS = Path(__file__).parents[1] / "recordings"

#: The options each recording was made with, and is replayed with.
OPTIONS: dict[str, dict[str, Any]] = {"demo": {}, "deferred": {}, "failures": {"timeout": 0.05}, "crashes": {}}

#: The calls each recording holds (``say``, ``decide``, ``answer``, ``resume`` and ``end``).
CALLS = {"demo": 2, "deferred": 6, "failures": 6, "crashes": 4}


class Person:
    """A scripted person who can also stay silent (``"silent"``: never decides or answers) and defer."""

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps

    async def _next(self) -> Any:
        step = self.steps.pop(0)
        if step == "silent":
            await anyio.sleep_forever()
        return Defer() if step == "defer" else step

    async def decide(self, suggestion: Suggestion) -> Any:
        step = await self._next()
        return {"accept": Accept(), "dismiss": Dismiss()}.get(step, step) if isinstance(step, str) else step

    async def answer(self, ask: Ask) -> Any:
        step = await self._next()
        return step if isinstance(step, Defer) else step["answer"]


async def record_demo() -> list[LogEntry]:
    """The shipped demo conversation."""
    return list((await run_demo(lambda line: None)).log)


async def record_deferred() -> list[LogEntry]:
    """Decisions and an answer deferred, then given later (some refused) by named people in other workers, a
    ``Say`` instead of a decision, and words that supersede what still waited."""
    store, notes = MemoryStore(), NotesDomain()  # the workers share the notebook, as they would a database

    async def worker(replies: list[str], steps: list[Any]) -> Conversation:
        return await Conversation.open(
            store, "deferred", agent=ScriptedAgent(replies), domain=notes, human=Person(steps)
        )

    first = await worker(
        [
            envelope(
                "<dial-inform>Two notes, and a question.</dial-inform>",
                suggest("add-note", '{"text":"dentist on monday"}'),
                suggest("add-note", '{"text":"gym"}'),
                '<dial-ask id="when">Mornings or evenings?</dial-ask>',
            )
        ],
        ["defer", "defer", "defer"],
    )
    assert (await first.say("plan my week")).status == "awaiting"
    second = await worker(
        [
            envelope(
                suggest("remove-note", '{"text":"dentist on monday"}', text="The dentist moved"),
                suggest("add-note", '{"text":"dentist on tuesday"}'),
            ),
            envelope('<dial-ask id="which">Which one?</dial-ask>'),
        ],
        ["defer", {"say": "wait, which dentist?"}, "defer"],
    )
    assert (await second.decide("sg-1", Accept(), by="ada")).status == "awaiting"
    assert (await second.decide("sg-2", Edit({"text": "gym " * 20}), by="bob")).status == "awaiting"
    assert (await second.decide("sg-2", Edit({"text": "gym on friday"}), by="bob")).status == "awaiting"
    assert (await second.answer("when", "mornings", by="ada")).status == "awaiting"
    third = await worker([envelope(suggest("list-notes", "{}"), '<dial-phatic signal="session-complete"/>')], [])
    assert (await third.say("never mind, list my notes")).status == "ended"
    return await store.read("deferred")


async def record_failures() -> list[LogEntry]:
    """An unusable reply, an expired decision, a reply that never came, a failed send, an expired ask, and words
    said after the conversation ended."""

    def fail(message: str) -> str:
        raise ConnectionError("the line went dead")

    agent = Agent(
        [
            "<dial><<</dial>",
            envelope(suggest("add-note", '{"text":"call mum"}')),
            hang,
            fail,
            envelope(
                '<dial-ask id="tag" timeout="0.01">Which tag?</dial-ask>',
                suggest("add-note", '{"text":"call mum"}'),
            ),
            "All set.",
        ]
    )
    person = Person(["silent", "silent", "accept"])
    conversation = Conversation(
        agent=agent, domain=NotesDomain(), human=person, decide_timeout=30, **OPTIONS["failures"]
    )
    assert (await conversation.say("add a note: call mum")).status == "idle"
    assert (await conversation.say("hello?")).status == "no-reply"
    with pytest.raises(ConnectionError):
        await conversation.say("are you there?")
    assert (await conversation.say("let's try once more")).status == "idle"
    conversation.end()
    assert (await conversation.say("bye")).status == "ended"
    return list(conversation.log)


class SlowNotes(NotesDomain):
    """The demo's domain, but adding the note "slow" takes forever."""

    async def run(self, action: str, payload: Any) -> Any:
        if payload.get("text") == "slow":
            await anyio.sleep_forever()
        return super().run(action, payload)


async def crash(store: MemoryStore, call: Callable[[], Awaitable[object]]) -> MemoryStore:
    """Make ``call`` until it waits (every task is blocked), then let its process die: the store that survives
    holds what was stored then, and nothing the dying call logs afterwards."""
    survivor = MemoryStore()
    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        await survivor.append("crashes", await store.read("crashes"), expected_seq=0)
        group.cancel_scope.cancel()
    return survivor


async def record_crashes() -> list[LogEntry]:
    """A process that dies while the person decides in the middle of a reply, one that dies while an action runs,
    and one that dies while waiting for the agent; each next process opens the conversation, which recovers."""
    notes = SlowNotes()

    async def process(store: MemoryStore, replies: list[str], steps: list[Any]) -> Conversation:
        return await Conversation.open(
            store, "crashes", agent=ScriptedAgent(replies), domain=notes, human=Person(steps)
        )

    store = MemoryStore()
    two = envelope(suggest("add-note", '{"text":"fast"}'), suggest("add-note", '{"text":"slow"}'))
    first = await process(store, [two], ["silent"])
    store = await crash(store, lambda: first.say("add two notes"))
    second = await process(store, [], ["accept"])
    store = await crash(store, lambda: second.decide("sg-1", Accept(), by="ada"))
    third = await process(store, [], [])
    assert third.owed[-1].code == "interrupted"
    hanging = Agent([hang])
    third.agent = hanging
    store = await crash(store, third.resume)
    assert len(hanging.sent) == 1
    fourth = await process(store, ["<dial><dial-inform>Sorry, one failed.</dial-inform></dial>"], [])
    assert (await fourth.say("are you there?")).status == "idle"
    return await store.read("crashes")


RECORDERS: dict[str, Callable[[], Awaitable[list[LogEntry]]]] = {
    "demo": record_demo,
    "deferred": record_deferred,
    "failures": record_failures,
    "crashes": record_crashes,
}


def regenerate() -> None:
    """Hold every recorded conversation again (in virtual time) and write its log to ``tests/recordings/``."""
    for name, record in RECORDERS.items():
        entries = trio.run(record, clock=trio.testing.MockClock(autojump_threshold=0))
        with (RECORDINGS / f"{name}.jsonl").open("w", encoding="utf-8") as file:
            export_jsonl(entries, file, conversation_id=name)
        print(f"{name}: {len(entries)} events")


def recording(name: str) -> list[LogEntry]:
    with (RECORDINGS / f"{name}.jsonl").open(encoding="utf-8") as file:
        conversation_id, entries = import_jsonl(file)
    assert conversation_id == name
    return entries


def types(entries: list[LogEntry]) -> list[str]:
    return [entry.event.type for entry in entries]


class StrictNotes(NotesDomain):
    """The demo's domain, but notes must now be shorter than 12 characters."""

    def validate(self, action: str, payload: Any) -> dict[str, Any]:
        if action == "add-note" and len(payload.get("text", "")) >= 12:
            return {"ok": False, "code": "too-long", "field": "text", "hint": "Keep a note under 12 chars."}
        return super().validate(action, payload)


class LabelledNotes(NotesDomain):
    """The demo's domain with a different preview for added notes."""

    def preview(self, action: str, payload: Any) -> str:
        return f"New note: {payload['text']}" if action == "add-note" else super().preview(action, payload)


# --- the recordings ---------------------------------------------------------------------------------------------


def test_the_recordings_hold_what_they_are_for() -> None:
    demo, deferred, failures = (set(types(recording(name))) for name in ("demo", "deferred", "failures"))
    assert {"refused", "action-started", "answered", "ended"} <= demo
    decided = [e.event for e in recording("deferred") if e.event.type == "decided"]
    assert {(d.decision, d.by) for d in decided} >= {("accept", "ada"), ("edit", "bob"), ("say", None)}
    assert {"deferred", "resumed", "refused", "answered"} <= deferred
    resumed = [e.event.call for e in recording("deferred") if e.event.type == "resumed"]
    assert resumed == ["decide", "decide", "decide", "answer", "say"]
    assert {"reply-refused", "no-reply", "send-failed", "ended"} <= failures
    events = [entry.event for entry in recording("failures")]
    assert any(e.type == "decided" and e.decision == "expire" for e in events)
    assert any(e.type == "answered" and e.expired for e in events)
    crashes = [entry.event for entry in recording("crashes")]
    stopped = [
        e.type for e in crashes if "the process stopped" in (getattr(e, "error", ""), getattr(e, "reason", ""))
    ]
    assert stopped == ["outcome", "interrupted"]


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(OPTIONS))
async def test_every_recording_replays_without_a_difference(name: str) -> None:
    entries = recording(name)
    # the demo's domain checks a note exists before removing it: its state must move as it did, so it runs
    report = replay(entries, domain=NotesDomain())
    assert report.divergences == ()
    assert report.ok
    assert report.calls == CALLS[name]
    assert report.turns == types(entries).count("sent")
    assert str(report).endswith("identical to the recording")


@pytest.mark.anyio
async def test_replay_takes_bare_events_too() -> None:
    entries = recording("deferred")
    report = replay([entry.event for entry in entries], domain=NotesDomain())
    assert report.ok and report.calls == 6


@pytest.mark.anyio
async def test_a_crash_is_replayed_as_a_crash() -> None:
    notes = NotesDomain()
    report = replay(recording("crashes"), domain=notes)
    assert report.ok, str(report)
    assert notes.notes == [], "a replay runs nothing: the recorded results stand in"


@pytest.mark.anyio
@pytest.mark.parametrize("size", [1, 7, 10_000])
async def test_a_streamed_conversation_replays_streamed(size: int) -> None:
    replies = [reply for _, turn_replies in SCRIPT for reply in turn_replies]
    conversation = Conversation(
        agent=StreamingAgent(replies, size=size), domain=NotesDomain(), human=Person(list(DECISIONS))
    )
    for words, _ in SCRIPT:
        await conversation.say(words)
    log = list(conversation.log)
    assert types(log).count("reply-started") == 5
    report = replay(log, domain=NotesDomain())
    assert report.ok, str(report)


class StoppedStreams(StreamingAgent):
    """Streams each reply, then breaks off (``broken: ...`` replies) or says the token limit stopped it
    (``limit: ...``); other replies end as they should."""

    async def stream(self, message: str) -> AsyncIterator[str]:
        async for chunk in super().stream(message):
            yield chunk
        if self.answered.startswith("limit: "):
            raise TokenLimitReached("the model reached its token limit")
        if self.answered.startswith("broken: "):
            raise AgentError("the connection was reset")

    answered = ""

    async def send(self, message: str) -> str:
        self.answered = await super().send(message)
        return self.answered


@pytest.mark.anyio
async def test_a_stream_cut_by_the_token_limit_or_broken_off_replays_as_it_stopped() -> None:
    agent = StoppedStreams(["limit: <dial><dial-inform>on", "broken: <dial><dial-inform>on", "fine"])
    conversation = Conversation(agent=agent, domain=NotesDomain(), human=Person([]))
    await conversation.say("go")
    causes = [entry.event.cause for entry in conversation.log if isinstance(entry.event, ReplyCutEvent)]
    assert causes == ["token-limit", "broken"]
    report = replay(list(conversation.log), domain=NotesDomain())
    assert report.ok, str(report)


@pytest.mark.anyio
async def test_a_conversation_stored_while_the_person_decides_replays_to_where_it_stands() -> None:
    store = MemoryStore()
    two = envelope(suggest("add-note", '{"text":"fast"}'), suggest("add-note", '{"text":"slow"}'))
    conversation = await Conversation.open(
        store, "crashes", agent=ScriptedAgent([two]), domain=NotesDomain(), human=Person(["accept", "silent"])
    )
    log = await (await crash(store, lambda: conversation.say("go"))).read("crashes")
    assert types(log)[-3:] == ["outcome", "proposed", "suggestion"]
    notes = NotesDomain()
    report = replay(log, domain=notes)
    assert report.ok and notes.notes == [], str(report)


async def hold(domain: NotesDomain, reply: str, steps: list[Any]) -> list[LogEntry]:
    """The log of a one-``say`` conversation whose agent sends ``reply``, then "ok" if a turn follows."""
    conversation = Conversation(agent=Agent([reply, "ok"]), domain=domain, human=Person(steps))
    await conversation.say("go")
    return list(conversation.log)


class Lenient(NotesDomain):
    """The demo's domain, accepting any payload."""

    def validate(self, action: str, payload: Any) -> dict[str, Any]:
        return {"ok": True}


@pytest.mark.anyio
async def test_what_the_recording_never_asked_is_dismissed_and_what_it_never_sent_fails() -> None:
    long = envelope(suggest("add-note", json.dumps({"text": "x" * 70})))
    refused = await hold(NotesDomain(), long, [])
    assert "sent" in types(refused[4:]), "an invalid suggestion makes a turn follow"
    lenient = Lenient()
    assert replay(refused, domain=lenient).ok, "dry, the recorded verdict stands"
    report = replay(refused, domain=lenient, recheck=True)
    assert lenient.notes == []
    decided, missing = report.divergences[1], report.divergences[-1]
    assert decided.replayed is not None and decided.recorded is None
    assert (decided.replayed["decision"], decided.replayed["suggestion_id"]) == ("dismiss", "sg-1")
    assert (missing.turn, missing.recorded and missing.recorded["type"], missing.replayed) == (2, "finished", None)

    dismissed = await hold(Lenient(), long, ["dismiss"])
    assert types(dismissed).count("sent") == 1
    report = replay(dismissed, domain=NotesDomain(), recheck=True)
    error = "LookupError: the recording holds no answer to this message"
    extra = [d.replayed for d in report.divergences if d.turn == 2]
    assert extra[1] == {"type": "send-failed", "turn": 2, "error": error}
    assert extra[-1] == {"type": "raised", "error": error}


# --- what a replay finds ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_domain_that_now_refuses_diverges_where_it_refuses() -> None:
    assert replay(recording("demo"), domain=StrictNotes()).ok, "dry, the recorded verdicts stand"
    report = replay(recording("demo"), domain=StrictNotes(), recheck=True)
    assert not report.ok and report.rechecked
    first = report.divergences[0]
    assert (first.call, first.turn) == (2, 1)
    assert first.recorded is not None and first.replayed is not None
    assert first.recorded["type"] == "suggestion" and first.recorded["id"] == "sg-2"
    invalid = OutcomeEvent(
        id="sg-2",
        action="add-note",
        status="invalid",
        code="too-long",
        field="text",
        hint="Keep a note under 12 chars.",
        trigger="reject",
    )
    assert first.replayed == event_to_dict(invalid)
    assert all(d.call == 2 for d in report.divergences), "call 1 (buy milk) is short enough"
    assert {d.turn for d in report.divergences} == {1, 2, 3}, "refused, told so, one note fewer in the context"
    told = [d for d in report.divergences if d.turn == 2 and d.position == 0]
    assert told and "sg-2:invalid" in told[0].replayed["message"]  # type: ignore[index]
    assert "sg-2:done" in told[0].recorded["message"]  # type: ignore[index]


@pytest.mark.anyio
async def test_a_changed_preview_diverges_in_each_event_that_shows_it() -> None:
    report = replay(recording("demo"), domain=LabelledNotes(), recheck=True)
    in_call_1 = [
        (d.turn, d.position, d.recorded and d.recorded["type"]) for d in report.divergences if d.call == 1
    ]
    assert in_call_1 == [(1, 4, "suggestion"), (1, 6, "action-started"), (1, 7, "outcome"), (2, 0, "sent")]
    assert str(report.divergences[0]) == (
        "call 1, turn 1, event 4: suggestion sg-1: "
        'preview recorded "Add the note \'buy milk\'", replayed "New note: buy milk"'
    )
    assert str(report).startswith(
        f"replayed 2 call(s), 5 turn(s): {len(report.divergences)} divergence(s)\n"
        "  (the domain was asked again: a verdict that differs is the domain's)\n  "
    )


@pytest.mark.anyio
async def test_a_refused_deferred_decision_that_now_passes_diverges_in_its_own_call() -> None:
    report = replay(recording("deferred"), domain=Lenient(), recheck=True)
    first = report.divergences[0]
    assert (first.call, first.turn, first.position) == (3, 1, 2)
    assert first.recorded is not None and first.recorded["type"] == "refused"
    assert first.replayed is not None and first.replayed["type"] == "action-started"
    # the next call decides on a suggestion that no longer waits: it raises, and what it logged is missing
    fourth = [d for d in report.divergences if d.call == 4]
    assert fourth[0].recorded == {"type": "resumed", "call": "decide"}
    assert fourth[0].replayed == {
        "type": "raised",
        "error": "AlreadyDecided: 'sg-2' was already decided by bob (edit)",
    }
    assert [d.recorded and d.recorded["type"] for d in fourth[1:] if d.replayed is None] == [
        "decided",
        "action-started",
        "outcome",
        "handled",
        "finished",
    ]


@pytest.mark.anyio
async def test_a_different_runtime_result_is_found_at_its_position() -> None:
    """Stands in for a runtime change: the recording's outcome reports what this runtime words otherwise."""
    entries = recording("demo")
    index, ended = next((i, e) for i, e in enumerate(entries) if e.event.type == "outcome")
    assert isinstance(ended.event, OutcomeEvent)
    reworded = msgspec.structs.replace(ended.event, preview="Added 'buy milk'")
    entries[index] = LogEntry(seq=ended.seq, time=ended.time, event=reworded)
    report = replay(entries, domain=NotesDomain())
    first = report.divergences[0]
    assert (first.call, first.turn, first.position) == (1, 1, 7)
    assert str(first) == (
        "call 1, turn 1, event 7: outcome sg-1: preview recorded \"Added 'buy milk'\", "
        "replayed \"Add the note 'buy milk'\""
    )


@pytest.mark.anyio
async def test_failures_are_replayed_as_they_happened() -> None:
    entries = recording("failures")
    raised = [e.event for e in entries if e.event.type == "send-failed"]
    assert [e.error for e in raised] == ["ConnectionError: the line went dead"]
    # the log holds each deadline: a replay given another one (no longer needed) is told so, and uses the log's
    with pytest.warns(DeprecationWarning, match="timeout no longer needed"):
        report = replay(entries, domain=NotesDomain(), timeout=0.07)
    assert report.ok, str(report)


def test_a_divergence_reads_as_one_line_per_side() -> None:
    said = {"type": "said", "text": "hi"}
    assert (
        str(Divergence(call=1, turn=0, position=0, recorded=said, replayed=None))
        == 'call 1, turn 0, event 0: recorded said {"text": "hi"}, missing from the replay'
    )
    assert (
        str(Divergence(call=2, turn=1, position=3, recorded=None, replayed=said))
        == 'call 2, turn 1, event 3: replayed said {"text": "hi"}, not in the recording'
    )
    other = {"type": "finished", "status": "idle", "turns": 1}
    assert str(Divergence(call=1, turn=1, position=5, recorded=said, replayed=other)) == (
        'call 1, turn 1, event 5: recorded said {"text": "hi"}, replayed finished {"status": "idle", "turns": 1}'
    )


@pytest.mark.anyio
async def test_a_log_must_begin_with_a_call() -> None:
    entries = recording("failures")
    with pytest.raises(ValueError, match="the log begins with a 'sent' event, not with a call"):
        replay(entries[1:], domain=NotesDomain())


# --- JSON Lines -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_export_then_import_is_lossless(name: str) -> None:
    entries = recording(name)
    written = io.StringIO()
    export_jsonl(entries, written, conversation_id="copy")
    assert import_jsonl(io.StringIO(written.getvalue())) == ("copy", entries)
    assert written.getvalue() == (RECORDINGS / f"{name}.jsonl").read_text(encoding="utf-8").replace(
        f'"conversation_id": "{name}"', '"conversation_id": "copy"', 1
    )


def test_values_json_cannot_spell_plainly_survive() -> None:
    odd = ["\ud800 lone", "naïve ✓", "\x00", 1e308, -0.0, {"nested": [True, None]}]
    entries = [
        LogEntry(seq=1, time=1.5, event=SaidEvent(text="\udfff")),
        LogEntry(seq=2, time=2.25, event=DeclareEvent(context_key="odd", value=odd)),
        LogEntry(seq=3, time=3.0, event=DeclareEvent(context_key="nan", value=math.nan)),
    ]
    written = io.StringIO()
    export_jsonl(entries, written, conversation_id="odd")
    assert written.getvalue().isascii()
    _, read = import_jsonl(io.StringIO(written.getvalue()))
    assert read[:2] == entries[:2]
    nan = read[2].event
    assert isinstance(nan, DeclareEvent) and nan.context_key == "nan" and math.isnan(nan.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: the file is empty"),
        ('{"format": "other", "version": 1, "conversation_id": "x"}\n', "line 1: not a dial-runtime-log file"),
        ("[1, 2]\n", "line 1: not a dial-runtime-log file"),
        ('{"format": "dial-runtime-log", "version": 3, "conversation_id": "x"}\n', "version 3 is not supported"),
        ('{"format": "dial-runtime-log", "version": true, "conversation_id": "x"}\n', "version True is not"),
        ('{"format": "dial-runtime-log", "version": 1}\n', "line 1: the header has no conversation_id"),
        ("HEADER\n\n{not json\n", "line 3: not JSON"),
        ('HEADER\n{"seq": 1, "time": 0}\n', r"line 2: not a log entry \(KeyError: 'event'\)"),
        ('HEADER\n{"seq": 1, "time": 0, "event": {"type": "nope"}}\n', "line 2: not a log entry .*unknown event"),
        ('HEADER\n{"seq": 1, "time": 0, "event": {"type": "said", "txt": "a"}}\n', "line 2: not a log entry"),
        ('HEADER\n{"seq": 2, "time": 0, "event": {"type": "said", "text": "a"}}\n', "line 2: .*seq 2, expected 1"),
    ],
)
def test_a_bad_file_is_refused_with_its_line(text: str, message: str) -> None:
    header = '{"format": "dial-runtime-log", "version": 1, "conversation_id": "x"}'
    with pytest.raises(LogError, match=message):
        import_jsonl(io.StringIO(text.replace("HEADER", header)))


# --- the command line, against a SQLite store -------------------------------------------------------------------


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:{tmp_path / 'logs.db'}"


def test_import_then_export_gives_the_file_back(store: str, tmp_path: Path, capsys: Any) -> None:
    for name in OPTIONS:
        path = RECORDINGS / f"{name}.jsonl"
        count = len(recording(name))
        assert run(["import", str(path), "--store", store], capsys) == (
            0,
            f"imported {count} event(s) into {store} as {name!r}\n",
            "",
        )
        out = tmp_path / f"{name}.jsonl"
        assert run(["export", name, "--store", store, "-o", str(out)], capsys) == (0, "", "")
        with out.open(encoding="utf-8") as exported, path.open(encoding="utf-8") as original:
            assert import_jsonl(exported) == import_jsonl(original)  # the same entries, now with their hashes
        assert all('"hash":"2:' in line for line in out.read_text(encoding="utf-8").splitlines()[1:])


def test_import_refuses_a_conversation_that_has_events(store: str, capsys: Any) -> None:
    path = str(RECORDINGS / "demo.jsonl")
    assert run(["import", path, "--store", store], capsys)[0] == 0
    status, _, err = run(["import", path, "--store", store], capsys)
    assert status == 1 and "conversation 'demo' already has events" in err
    assert run(["import", path, "--store", store, "--id", "demo-2"], capsys)[0] == 0

    async def stored() -> list[int]:
        logs = open_store(store)
        try:
            return [len(await logs.read(name)) for name in await logs.conversations()]
        finally:
            await logs.aclose()

    assert trio.run(stored) == [len(recording("demo"))] * 2


def test_replay_exits_0_when_identical_and_1_on_divergence(store: str, capsys: Any) -> None:
    for name in OPTIONS:
        assert run(["import", str(RECORDINGS / f"{name}.jsonl"), "--store", store], capsys)[0] == 0
        # a deadline once needed is accepted, unused, with a line that says so (the log records each deadline)
        timeout = [f"--timeout={OPTIONS[name]['timeout']}"] if OPTIONS[name] else []
        domain = ["--domain", "dial_runtime.demo:NotesDomain"]
        status, out, err = run(["replay", name, "--store", store, *domain, *timeout], capsys)
        assert (status, out.strip().endswith("identical to the recording")) == (0, True), out
        assert ("--timeout: no longer needed" in err) == bool(timeout), err
        file = str(RECORDINGS / f"{name}.jsonl")
        assert run(["replay", "--file", file, *domain], capsys)[0] == 0
    strict = ["--domain", "tests.driver.test_replay:StrictNotes"]
    assert run(["replay", "demo", "--store", store, *strict], capsys)[0] == 0
    status, out, _ = run(["replay", "demo", "--store", store, *strict, "--recheck"], capsys)
    assert status == 1
    lines = out.splitlines()
    assert re.fullmatch(r"replayed 2 call\(s\), \d turn\(s\): \d+ divergence\(s\)", lines[0])
    assert lines[2].startswith("  call 2, turn 1, event ")
    assert run(["replay", "demo", "--store", store, "--recheck"], capsys)[0] == 2


def test_replay_reports_what_it_cannot_read(store: str, tmp_path: Path, capsys: Any) -> None:
    domain = ["--domain", "dial_runtime.demo:NotesDomain"]
    status, _, err = run(["replay", "nobody", "--store", store, *domain], capsys)
    assert status == 1 and "no such database file" in err
    assert not Path(store.removeprefix("sqlite:")).exists(), "a read-only command creates no database"
    assert run(["import", str(RECORDINGS / "demo.jsonl"), "--store", store], capsys)[0] == 0
    status, _, err = run(["replay", "nobody", "--store", store, *domain], capsys)
    assert status == 1 and "holds no conversation 'nobody'" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "dial-runtime-log", "version": 9, "conversation_id": "x"}\n', encoding="utf-8")
    status, _, err = run(["replay", "--file", str(bad), *domain], capsys)
    assert status == 1 and "version 9 is not supported" in err
    status, _, err = run(["replay", "--file", str(RECORDINGS / "demo.jsonl"), "--domain", "nope"], capsys)
    assert status == 2 and "expected module:factory" in err
    status, _, err = run(["replay", "--store", store, *domain], capsys)
    assert status == 2 and "needs the conversation's ID" in err
    assert run(["log", "nobody", "--store", store], capsys)[0] == 1
    assert run(["export", "nobody", "--store", store], capsys)[0] == 1
    assert run(["import", str(bad), "--store", store], capsys)[0] == 1
    bad.write_text('{"format": "dial-runtime-log", "version": 1, "conversation_id": "x"}\n', encoding="utf-8")
    status, _, err = run(["import", str(bad), "--store", store], capsys)
    assert status == 1 and "holds no events" in err


ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_the_log_is_an_audit_trail(store: str, capsys: Any) -> None:
    assert run(["import", str(RECORDINGS / "deferred.jsonl"), "--store", store], capsys)[0] == 0
    status, out, _ = run(["log", "deferred", "--store", store], capsys)
    assert status == 0
    lines = out.splitlines()
    assert all(re.match(rf"{ISO}  #\d+ +\S", line) for line in lines), lines
    body = [re.sub(rf"^{ISO}  #\d+ +", "", line) for line in lines]
    for expected in [
        'said          "plan my week"',
        'proposed      sg-1 add-note {"text": "dentist on monday"}',
        "shown         sg-1 \"Add the note 'dentist on monday'\"",
        "deferred      suggestion sg-1",
        'asked         when "Mornings or evenings?" (text)',
        "deferred      ask when",
        "finished      awaiting after 1 turn(s)",
        "resumed       with decide()",
        "decided       sg-1 accept by ada",
        'run           sg-1 add-note {"text": "dentist on monday"}',
        'outcome       sg-1 done {"count": 1}',
        'decided       sg-2 edit by bob: {"text": "gym"} → {"text": "' + "gym " * 20 + '"}',
        'refused       sg-2 {"text": "'
        + "gym " * 20
        + '"}: invalid-payload (text): Expected `str` of length <= 60.',
        'decided       sg-2 edit by bob: {"text": "' + "gym " * 20 + '"} → {"text": "gym on friday"}',
        'run           sg-2 add-note {"text": "gym on friday"} (edited)',
        'answered      when by ada: "mornings"',
        "sent          turn 1",
        "sent          turn 2, reporting sg-1:done, sg-2:done",
        "shown         sg-3 \"Remove the note 'dentist on monday'\" [destructive]",
        'decided       sg-4 say instead: "wait, which dentist?"',
        "outcome       sg-3 superseded",
        "answered      which: nothing (the question stands)",
        "finished      interrupted after 3 turn(s)",
        'shown         sg-5 "List the notes" [read-only: runs without asking]',
        "ended         the agent signalled session-complete",
        "finished      ended after 1 turn(s)",
    ]:
        assert expected in body, expected
    assert not any(line.startswith(("reply", "inform", "handled")) for line in body)


def test_the_log_of_failures_names_each_one() -> None:
    lines = [line for entry in recording("failures") if (line := audit_line(entry)) is not None]
    body = [re.sub(rf"^{ISO}  #\d+ +", "", line) for line in lines]
    for expected in [
        "reply refused reply-1 (turn 1): ",
        "decided       sg-1 expired: no decision in time",
        "outcome       sg-1 dismissed expired",
        "no reply      turn 1: The agent didn't reply within 0.05s",
        "send failed   turn 1: ConnectionError: the line went dead",
        "answered      tag: no answer in time",
        "ended         end() was called",
        'said          "bye"',
    ]:
        assert any(line.startswith(expected) for line in body), expected


def test_the_log_shows_facts_hand_overs_and_limits_and_leaves_out_the_agents_words() -> None:
    events = [
        AskEvent(
            id="ask-1", text="Which?", response_type="choice", options=[Option(value="a"), Option(value="b")]
        ),
        AskEvent(id="ask-2", text="Also?", asked=False),
        DeclareEvent(context_key="mood", value={"level": 3}),
        DelegateEvent(to="billing", intent="refund", text="Refund it"),
        DelegateEvent(to="ops"),
        TurnLimitEvent(turns=8),
        InformEvent(text="Hello."),
        ReplyEvent(turn=1, text="<dial/>"),
    ]
    lines = [audit_line(LogEntry(seq=n, time=0.0, event=event)) for n, event in enumerate(events, 1)]
    assert lines == [
        '1970-01-01T00:00:00.000Z  #1    asked         ask-1 "Which?" (choice: a, b)',
        '1970-01-01T00:00:00.000Z  #2    asked         ask-2 "Also?" (text) [not put to the person]',
        '1970-01-01T00:00:00.000Z  #3    declared      mood = {"level": 3}',
        '1970-01-01T00:00:00.000Z  #4    delegated     to billing (refund): "Refund it"',
        "1970-01-01T00:00:00.000Z  #5    delegated     to ops",
        "1970-01-01T00:00:00.000Z  #6    turn limit    8 turn(s) used",
        None,
        None,
    ]


def test_a_conversation_held_on_sqlite_is_logged_and_replayed(store: str, capsys: Any) -> None:
    async def hold() -> None:
        logs = open_store(store)
        try:
            agent = ScriptedAgent([envelope(suggest("add-note", '{"text":"tea"}')), "Added."])
            conversation = await Conversation.open(
                logs, "live", agent=agent, domain=NotesDomain(), human=Person(["defer"])
            )
            assert (await conversation.say("add tea")).status == "awaiting"
            assert (await conversation.decide("sg-1", {"edit": {"text": "green tea"}}, by="cy")).status == "idle"
        finally:
            await logs.aclose()

    trio.run(hold)
    status, out, _ = run(["log", "live", "--store", store], capsys)
    assert status == 0 and 'sg-1 edit by cy: {"text": "tea"} → {"text": "green tea"}' in out
    domain = ["--domain", "dial_runtime.demo:NotesDomain"]
    assert run(["replay", "live", "--store", store, *domain], capsys)[0] == 0
    labelled = ["--domain", "tests.driver.test_replay:LabelledNotes", "--recheck"]
    assert run(["replay", "live", "--store", store, *labelled], capsys)[0] == 1


if __name__ == "__main__":
    regenerate()
