"""Replay at its edges: dry by default (nothing the recording ran runs again), and every way a call can end,
cancelled ones included, replays identical against unchanged code."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio.testing

from dial_runtime import Accept, ActionSpec, Conversation, Defer, Dismiss, LogEntry, Suggestion
from dial_runtime.cli import main
from dial_runtime.demo import NotesDomain
from dial_runtime.driver.replay import NOT_RUN, replay
from dial_runtime.runtime.records import Ask
from dial_runtime.stores.jsonl import export_jsonl

from ..fakes import envelope, suggest

pytestmark = pytest.mark.anyio

ADD = envelope(suggest("add-note", '{"text":"milk"}'))
TWO = envelope(suggest("add-note", '{"text":"milk"}'), suggest("add-note", '{"text":"bread"}'))
ASK = envelope('<dial-ask id="when">When?</dial-ask>')
DONE = "<dial><dial-inform>Done.</dial-inform></dial>"
CUT = "Right. " + ADD[: -len("</dial>")] + "<dial-inform>and th"


class FileNotes(NotesDomain):
    """The demo's notes, each one also appended to a file: an action with an effect outside the process."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def run(self, action: str, payload: Any) -> Any:
        result = super().run(action, payload)
        if action == "add-note":
            with self.path.open("a", encoding="utf-8") as file:
                file.write(payload["text"] + "\n")
        return result


def file_notes() -> FileNotes:
    """The factory ``--domain tests.driver.test_replay_edges:file_notes`` names: notes kept in $NOTES_FILE."""
    import os

    return FileNotes(Path(os.environ["NOTES_FILE"]))


class Stopper:
    """Cancels the call it is part of when it is reached: where it stands (the agent's reply, the person's
    decision, an action) the call is cut, exactly as Ctrl-C in chat cuts it, with no clock involved."""

    def __init__(self, why: str | None = None) -> None:
        self.scope: anyio.CancelScope | None = None
        self.why = why  # what the surface says of the cancellation, as chat says "cancelled by the person"
        self.conversation: Conversation | None = None

    async def stop(self) -> Any:
        assert self.scope is not None
        if self.why is not None:
            assert self.conversation is not None
            self.conversation.cancelling(self.why)
        self.scope.cancel()
        await anyio.sleep_forever()


class Agent:
    """Replies in order; ``"stop"`` cancels the call while the reply is awaited, ``"hang"`` never replies,
    ``"fail"`` raises."""

    def __init__(self, replies: list[str], stopper: Stopper) -> None:
        self.replies, self.stopper = replies, stopper

    async def send(self, message: str) -> str:
        reply = self.replies.pop(0)
        if reply == "stop":
            return await self.stopper.stop()  # type: ignore[no-any-return]
        if reply == "hang":
            await anyio.sleep_forever()
        if reply == "fail":
            raise ConnectionError("the line went dead")
        return reply


class StreamingAgent(Agent):
    """Streams each reply in three pieces; ``"stop"`` cancels between the first and the second; ``"idle:"`` and
    ``"trickle:"`` stream their text, then nothing or a space a second, forever."""

    async def stream(self, message: str) -> Any:
        reply = self.replies[0]
        if reply.startswith(("idle:", "trickle:")):
            self.replies.pop(0)
            kind, _, text = reply.partition(":")
            yield text
            while True:  # nothing more, or a space each second: a deadline cuts the reply
                if kind == "idle":
                    await anyio.sleep_forever()
                await anyio.sleep(1.0)
                yield " "
        if reply.startswith("stop:"):
            self.replies.pop(0)
            text = reply.removeprefix("stop:")
            yield text[: len(text) // 2]
            await self.stopper.stop()
        reply = await self.send(message)
        third = max(len(reply) // 3, 1)
        for start in range(0, len(reply), third):
            yield reply[start : start + third]


class Person:
    """Decides and answers from a script; ``"stop"`` cancels the call while the person is deciding."""

    def __init__(self, steps: list[Any], stopper: Stopper) -> None:
        self.steps, self.stopper = steps, stopper

    async def decide(self, suggestion: Suggestion) -> Any:
        step = self.steps.pop(0)
        if step == "stop":
            return await self.stopper.stop()
        return {"accept": Accept(), "dismiss": Dismiss(), "defer": Defer()}[step]

    async def answer(self, ask: Ask) -> Any:
        step = self.steps.pop(0)
        if step == "stop":
            return await self.stopper.stop()
        return Defer() if step == "defer" else step


class SlowNotes(NotesDomain):
    """Adding the note "slow" cancels the call while the action runs."""

    def __init__(self, stopper: Stopper) -> None:
        super().__init__()
        self.stopper = stopper

    async def run(self, action: str, payload: Any) -> Any:
        if payload.get("text") == "slow":
            return await self.stopper.stop()
        return super().run(action, payload)


#: Each way a call can end: the replies, the person's steps, and the calls (``say`` words) made in order.
ENDINGS: dict[str, tuple[list[str], list[Any], list[str]]] = {
    "cancelled-before-the-reply": (["stop", DONE], [], ["add milk", "again"]),
    "cancelled-during-a-decision": ([TWO, DONE], ["accept", "stop"], ["add two", "never mind"]),
    "cancelled-during-an-action": (
        [envelope(suggest("add-note", '{"text":"slow"}')), DONE],
        ["accept"],
        ["add slow", "well?"],
    ),
    "cancelled-during-an-answer": ([ASK, DONE], ["stop"], ["plan", "later"]),
    "no-reply": (["hang", DONE], [], ["hello?", "again"]),
    "send-failed": (["fail", DONE], [], ["hello?", "again"]),
    "deferred": ([TWO, DONE], ["accept", "defer"], ["add two", "something else"]),
    "cancelled-while-streaming": ([f"stop:{ADD}", DONE], [], ["add milk", "again"]),
    "cut-while-streaming-by-the-idle-deadline": ([f"idle:{CUT}", DONE, DONE], ["accept"], ["add milk", "again"]),
    "cut-while-streaming-by-the-reply-deadline": (
        [f"trickle:{CUT}", DONE, DONE],
        ["accept"],
        ["add milk", "again"],
    ),
    "cancelled-while-streaming-prose": (
        [f"stop:{'Let me think about it. ' * 4}{ADD}", DONE],
        [],
        ["add milk", "again"],
    ),
}


async def hold(name: str, *, streamed: bool, why: str | None = None) -> list[LogEntry]:
    """The log of a conversation that ends its first call the way ``name`` says, then makes the next call; a
    cancellation is said to be ``why`` when given."""
    replies, steps, words = ENDINGS[name]
    stopper = Stopper(why)
    agent = (StreamingAgent if streamed or "streaming" in name else Agent)(list(replies), stopper)
    conversation = Conversation(  # no call budget: the reply's own 300 s deadline is longer than its 120 s
        agent=agent, domain=SlowNotes(stopper), human=Person(list(steps), stopper), timeout=5.0, call_timeout=None
    )
    stopper.conversation = conversation
    for said in words:
        with anyio.CancelScope() as scope:
            stopper.scope = scope
            with contextlib.suppress(ConnectionError):  # the send-failed ending raises the agent's error
                await conversation.say(said)
    return list(conversation.log)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    """trio with a virtual clock: the deadlines the recordings met (a 5 s no-reply, a reply's 300 s, an idle 30 s)
    pass at once, in the recording and in its replay."""
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}


@pytest.mark.parametrize("why", [None, "cancelled by the person"], ids=["bare", "said"])
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", sorted(ENDINGS))
async def test_every_way_a_call_ends_replays_identical(name: str, streamed: bool, why: str | None) -> None:
    log = await hold(name, streamed=streamed, why=why)
    kinds = [entry.event.type for entry in log]
    assert kinds.count("said") == 2 and "finished" in kinds
    if name.startswith("cancelled"):
        (interrupted,) = [entry.event for entry in log if entry.event.type == "interrupted"]
        assert interrupted.reason == (why or "the call was cancelled")
    if name.startswith("cut"):
        (refused,) = [entry.event for entry in log if entry.event.type == "reply-refused"]
        assert refused.reason.startswith(f"the reply was cut: the {name.split('-')[-2]} deadline passed")
    report = replay(log, domain=NotesDomain())
    assert report.divergences == (), str(report)


async def test_a_dry_replay_runs_nothing_and_the_recorded_results_stand_in(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    stopper = Stopper()
    conversation = Conversation(
        agent=Agent([TWO, DONE], stopper), domain=FileNotes(path), human=Person(["accept", "accept"], stopper)
    )
    await conversation.say("add two")
    assert path.read_text() == "milk\nbread\n"
    log = list(conversation.log)

    notes = FileNotes(path)
    for recheck in (False, True):
        report = replay(log, domain=notes, recheck=recheck)
        assert report.ok and report.not_run == (), str(report)
        assert path.read_text() == "milk\nbread\n" and notes.notes == [], "nothing runs, rechecked or not"


class EagerNotes:
    """The demo's domain, but adding a note now runs without asking (read-only, wrongly): the replay would run
    what the person dismissed in the recording."""

    def __init__(self) -> None:
        self._notes = NotesDomain()
        self.notes = self._notes.notes
        self.actions = {**self._notes.actions, "add-note": ActionSpec(mutates=False)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._notes, name)


async def test_a_dry_replay_says_where_the_new_code_would_have_run_something() -> None:
    stopper = Stopper()
    conversation = Conversation(
        agent=Agent([ADD, DONE], stopper), domain=NotesDomain(), human=Person(["dismiss"], stopper)
    )
    await conversation.say("add milk")
    notes = EagerNotes()
    assert replay(conversation.log, domain=notes).ok, "dry, the recorded declaration stands"
    report = replay(conversation.log, domain=notes, recheck=True)
    assert not report.ok and notes.notes == []
    (skipped,) = report.not_run
    assert (skipped.call, skipped.suggestion_id, skipped.action, skipped.payload) == (
        1,
        "sg-1",
        "add-note",
        {"text": "milk"},
    )
    outcomes = [d.replayed for d in report.divergences if d.replayed and d.replayed["type"] == "outcome"]
    assert outcomes[0]["code"] == NOT_RUN
    assert 'call 1: would have run add-note {"text": "milk"} (sg-1)' in str(report)


def test_the_replay_command_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, recorded = tmp_path / "notes.txt", tmp_path / "log.jsonl"
    stopper = Stopper()

    async def record() -> tuple[LogEntry, ...]:
        conversation = Conversation(
            agent=Agent([ADD, DONE], stopper), domain=FileNotes(path), human=Person(["accept"], stopper)
        )
        await conversation.say("add milk")
        return conversation.log

    with recorded.open("w", encoding="utf-8") as file:
        export_jsonl(anyio.run(record), file, conversation_id="c")
    monkeypatch.setenv("NOTES_FILE", str(path))
    domain = ["--domain", "tests.driver.test_replay_edges:file_notes"]
    assert main(["replay", "--file", str(recorded), *domain]) == 0
    assert main(["replay", "--file", str(recorded), *domain, "--recheck"]) == 0
    assert main(["replay", "--file", str(recorded)]) == 0
    assert path.read_text() == "milk\n"
    assert capsys.readouterr().out.count("identical to the recording") == 3


# --- the replay feeds the core: an untouched log from any surface replays identical, with no event loop ---------

REMOVE_AFTER_ADD = [
    envelope(suggest("add-note", '{"text":"milk"}')),
    envelope(suggest("remove-note", '{"text":"milk"}')),
    DONE,
]


class NamedPerson:
    """A person who says who they are (``by``), as the terminal's does with ``--as``, and accepts everything."""

    by = "ada"

    def decide(self, suggestion: Suggestion) -> Any:
        return Accept()

    def answer(self, ask: Ask) -> str:
        return "at noon"


async def test_a_log_whose_decisions_name_their_person_replays_identical_without_an_event_loop() -> None:
    """The terminal's person says ``by``; the web decides deferred suggestions ``by`` its principal. The replay
    hands the core those decisions as recorded, so ``by`` replays too, and the domain's state (which moved when
    the actions ran) is never consulted: the log answers for ``validate``."""
    live = Conversation(agent=Agent(list(REMOVE_AFTER_ADD), Stopper()), domain=NotesDomain(), human=NamedPerson())
    await live.say("add milk, then remove it")
    deferring = Conversation(
        agent=Agent([ADD, ASK, DONE], Stopper()), domain=NotesDomain(), human=Person(["defer", "defer"], Stopper())
    )
    await deferring.say("add milk")
    await deferring.decide("sg-1", Accept(), by="bob")
    await deferring.answer("when", "tomorrow", by="cy")
    for log in (live.log, deferring.log):
        assert {entry.event.by for entry in log if entry.event.type in ("decided", "answered")} - {None}
        report = await anyio.to_thread.run_sync(lambda log=log: replay(log, domain=NotesDomain()))
        assert report.ok, str(report)


async def test_a_state_dependent_check_diverges_only_when_the_domain_is_asked_again() -> None:
    """remove-note is valid only while its note exists: the recording added it first. A fresh domain has no
    notes, so asking it again refuses the removal, and the report says the domain was asked."""
    conversation = Conversation(
        agent=Agent(list(REMOVE_AFTER_ADD), Stopper()), domain=NotesDomain(), human=NamedPerson()
    )
    await conversation.say("add milk, then remove it")
    assert replay(conversation.log, domain=NotesDomain()).ok
    rechecked = replay(conversation.log, domain=NotesDomain(), recheck=True)
    assert not rechecked.ok and rechecked.rechecked
    first = rechecked.divergences[0]
    assert first.replayed is not None and first.replayed["type"] == "outcome"
    assert first.replayed["status"] == "invalid"
    assert "the domain was asked again" in str(rechecked)
