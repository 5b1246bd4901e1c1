"""Deadlines on the log: when a suggestion starts to wait for the person, its deadline is recorded; once it has
passed, the suggestion ends ``dismissed`` with ``expired: true``, exactly once, whichever comes first: the
deadline or a decision. A decision after it is not taken. A deferred suggestion expires at the next call or
``open`` of its conversation, or when a scheduler calls ``expire_due``.

Time is a hand-moved clock given to the conversation (every entry's time, and every deadline, is read from it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest

from dial_runtime import (
    Accept,
    ActionSpec,
    AlreadyDecided,
    Conversation,
    Defer,
    Dismiss,
    Domain,
    replay,
    scripted_human,
)
from dial_runtime.errors import LogError
from dial_runtime.runtime.core import ConversationCore
from dial_runtime.runtime.effects import Answer, Consult, LookUp, Replied, Review, Reviewed, Send
from dial_runtime.runtime.events import DecidedEvent, LogEntry, OutcomeEvent, ResumedEvent, SuggestionEvent
from dial_runtime.stores import MemoryStore
from dial_runtime.stores.jsonl import check_log

from ..fakes import Agent, Notes, envelope, suggest

PROPOSE = envelope(suggest("add-note", '{"text": "milk"}'))
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")


class Clock:
    """Seconds since the epoch, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def outcomes(log: Any) -> list[OutcomeEvent]:
    return [entry.event for entry in log if isinstance(entry.event, OutcomeEvent)]


async def deferred(clock: Clock, store: MemoryStore, **options: Any) -> tuple[Conversation, Notes]:
    domain = Notes()
    conversation = await Conversation.open(
        store,
        "c-1",
        agent=Agent([PROPOSE, ACK, ACK]),
        domain=domain,
        human=scripted_human(["defer"]),
        clock=clock,
        **options,
    )
    result = await conversation.say("add milk")
    assert result.status == "awaiting"
    return conversation, domain


@pytest.mark.anyio
async def test_a_decision_after_the_deadline_is_not_taken_and_the_suggestion_expires_once() -> None:
    clock, store = Clock(), MemoryStore()
    conversation, domain = await deferred(clock, store, decide_timeout=0.5)
    shown = next(entry for entry in conversation.log if isinstance(entry.event, SuggestionEvent))
    assert isinstance(shown.event, SuggestionEvent) and shown.event.deadline == shown.time + 0.5
    clock.now += 1.5
    for person in ("ada", "bob"):  # refused, the first time as every later time: it expired
        with pytest.raises(AlreadyDecided) as raised:
            await conversation.decide("sg-1", Accept(), by=person, via="web")
        assert raised.value.how == "expire"
    assert domain.ran == []  # the accept came too late: nothing ran
    stored = await store.read("c-1")
    assert [(o.id, o.status, o.expired) for o in outcomes(stored)] == [("sg-1", "dismissed", True)]
    expired = [e.event for e in stored if isinstance(e.event, DecidedEvent)]
    assert [(d.decision, d.by) for d in expired] == [("expire", None)]


def test_a_decision_the_deadline_overtakes_while_it_is_taken_expires_naming_who_was_late() -> None:
    clock = Clock()
    core = ConversationCore(decide_timeout=1, clock=clock)
    drive(core.say("add milk"), [PROPOSE], defer=True)
    call = core.decide("sg-1", Accept(), "ada", via="web")  # checked in time ...
    clock.now += 2  # ... and the deadline passes before the decision is recorded
    drive(call, [ACK])
    decided = [e for e in core.log.events if isinstance(e, DecidedEvent)]
    assert [(d.decision, d.by, d.via) for d in decided] == [("expire", "ada", "web")]
    assert [(o.status, o.expired) for o in core.state.owed_outcomes] == [("dismissed", True)]


def drive(call: Any, replies: list[str], *, defer: bool = False) -> None:
    """Drive a core's call: replies from the list, the notes domain's answers, a person who defers."""
    value: object = None
    while True:
        try:
            effect = call.send(value)
        except StopIteration:
            return
        if isinstance(effect, Send):
            value = Replied(replies.pop(0))
        elif isinstance(effect, LookUp):
            value = ActionSpec(mutates=True)
        elif isinstance(effect, Review):
            value = Reviewed(None, "Add milk")
        elif isinstance(effect, Consult):
            value = Answer(Defer())
        else:
            value = None


@pytest.mark.anyio
async def test_a_decision_in_time_is_taken_and_the_deadline_then_does_nothing() -> None:
    clock, store = Clock(), MemoryStore()
    conversation, domain = await deferred(clock, store, decide_timeout=10)
    clock.now += 9.9
    await conversation.decide("sg-1", Accept())
    assert domain.ran == [("add-note", {"text": "milk"})]
    clock.now += 100
    assert (await conversation.expire_due()).turns == 0
    assert [o.status for o in outcomes(conversation.log)] == ["done"]


@pytest.mark.anyio
async def test_a_deferred_suggestion_expires_when_its_conversation_is_next_opened() -> None:
    clock, store = Clock(), MemoryStore()
    first, _ = await deferred(clock, store, decide_timeout=30)
    assert first.deadlines == [("sg-1", _shown_at(first) + 30)]
    clock.now += 31
    agent = Agent([ACK])
    again = await Conversation.open(
        store, "c-1", agent=agent, domain=Notes(), human=scripted_human([]), clock=clock, decide_timeout=30
    )
    assert [(o.status, o.expired) for o in outcomes(again.log)] == [("dismissed", True)]
    assert again.pending == () and again.deadlines == []
    assert agent.sent == []  # a dismissal needs no reply: the agent hears of it with the next message
    await again.say("never mind")
    assert '"status":"dismissed"' in agent.sent[0] and '"expired":true' in agent.sent[0]


def _shown_at(conversation: Conversation) -> float:
    return next(entry.time for entry in conversation.log if isinstance(entry.event, SuggestionEvent))


@pytest.mark.anyio
async def test_a_scheduler_fires_due_deadlines_and_only_due_ones() -> None:
    clock, store = Clock(), MemoryStore()
    domain = Domain("notes")

    @domain.action(deadline=5)
    def add_note(text: str) -> None:
        """Add a note."""

    @domain.action(deadline=60)
    def remove_note(text: str) -> None:
        """Remove a note."""

    two = envelope(suggest("add-note", '{"text": "a"}'), suggest("remove-note", '{"text": "b"}'))
    conversation = await Conversation.open(
        store, "c-2", agent=Agent([two]), domain=domain, human=scripted_human(["defer", "defer"]), clock=clock
    )
    await conversation.say("go")
    start = _shown_at(conversation)
    assert conversation.deadlines == [("sg-1", start + 5), ("sg-2", start + 60)]
    clock.now += 4
    assert (await conversation.expire_due()).status == "idle"
    assert outcomes(conversation.log) == []
    clock.now += 2
    result = await conversation.expire_due()
    assert result.status == "awaiting"  # sg-2 still waits
    assert [(o.id, o.status, o.expired) for o in outcomes(conversation.log)] == [("sg-1", "dismissed", True)]
    assert conversation.deadlines == [("sg-2", start + 60)]


@pytest.mark.anyio
async def test_an_action_without_a_deadline_in_a_conversation_without_one_waits_for_ever() -> None:
    clock, store = Clock(), MemoryStore()
    conversation, _ = await deferred(clock, store)
    assert conversation.deadlines == []
    clock.now += 10**6
    await conversation.decide("sg-1", Dismiss())
    assert [(o.status, o.expired) for o in outcomes(conversation.log)] == [("dismissed", False)]


class SlowNotes(Notes):
    actions: ClassVar[dict[str, Any]] = {**Notes.actions, "add-note": ActionSpec(mutates=True, deadline=2)}


@pytest.mark.anyio
async def test_an_actions_deadline_comes_before_the_conversations() -> None:
    clock, store = Clock(), MemoryStore()
    conversation = await Conversation.open(
        store,
        "c-3",
        agent=Agent([PROPOSE, ACK]),
        domain=SlowNotes(),
        human=scripted_human(["defer"]),
        clock=clock,
        decide_timeout=100,
    )
    await conversation.say("add milk")
    assert conversation.deadlines == [("sg-1", _shown_at(conversation) + 2)]


def test_a_deadline_must_be_a_positive_number_of_seconds() -> None:
    for wrong in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="positive number of seconds"):
            ActionSpec(mutates=True, deadline=wrong)


@pytest.mark.anyio
async def test_the_fold_refuses_a_decision_logged_after_its_deadline() -> None:
    clock, store = Clock(), MemoryStore()
    conversation, _ = await deferred(clock, store, decide_timeout=1)
    log = list(conversation.log)
    late = log[-1].time + 5
    forged = [
        *log,
        LogEntry(seq=len(log) + 1, time=late, event=ResumedEvent(call="decide")),
        LogEntry(seq=len(log) + 2, time=late, event=DecidedEvent(suggestion_id="sg-1", decision="accept")),
    ]
    with pytest.raises(LogError, match="after its deadline"):
        check_log(forged)
    in_time = [*log, *(msgspec.structs.replace(entry, time=log[-1].time + 0.5) for entry in forged[len(log) :])]
    check_log(in_time)  # the same decision in time stands


@pytest.mark.anyio
async def test_a_log_with_expiries_replays_without_a_difference() -> None:
    clock, store = Clock(), MemoryStore()
    conversation, _ = await deferred(clock, store, decide_timeout=1)
    clock.now += 2
    await conversation.expire_due()
    await conversation.say("and eggs")
    assert [e.event.type for e in conversation.log].count("outcome") == 1
    report = replay(conversation.log, conversation_id="c-1")
    assert report.divergences == ()
