"""The event log: every event survives JSON, and a conversation rebuilt by folding its log behaves the same."""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

import msgspec
import pytest

from dial_runtime import Conversation, Dismiss, LogEntry, Outcome, scripted_human
from dial_runtime.errors import LogError
from dial_runtime.language.outcomes import STATUSES, OutcomeFields
from dial_runtime.runtime.events import (
    EVENT_TYPES,
    VOCABULARIES,
    ApprovalRefusedEvent,
    DecidedEvent,
    DeferredEvent,
    Event,
    FinishedEvent,
    InformEvent,
    OutcomeEvent,
    ReplyCutEvent,
    ResumedEvent,
    SentEvent,
    entry_from_dict,
    entry_to_dict,
    event_from_dict,
    event_to_dict,
)
from dial_runtime.runtime.state import ConversationState, checked_entry
from dial_runtime.statemachines import CALL_STATUS
from dial_runtime.stores.base import decode, encode

from ..fakes import Agent, Notes, Stall, envelope, hang, suggest

pytestmark = pytest.mark.anyio

RICH_REPLY = envelope(
    "<dial-inform>Here goes.</dial-inform>",
    '<dial-ask id="q" response-type="choice" timeout="5">Pick<dial-option value="a" default="true">A</dial-option>'
    "</dial-ask>",
    suggest("add-note", '{"text":"milk"}'),
    suggest("fly", "{}"),
    '<dial-declare context-key="mood">{"level":3}</dial-declare>',
    '<dial-delegate to="billing" intent="refund">Refund it<dial-context><dial-payload>{"n":1}</dial-payload>'
    "</dial-context></dial-delegate>",
    '<dial-execute id="x"><step id="s1" env="python" yield="s1:ok">print(1)</step></dial-execute>',
    '<dial-phatic signal="typing"/>',
    '<dial-acknowledge of="sg-9" yield="sg-9:done">Done before you asked.</dial-acknowledge>',
    prose="Hello.",
)


def script() -> list[Any]:
    return [{"answer": "a"}, {"edit": {"text": ""}}, {"edit": {"text": "oat milk"}}, "defer"]


async def rich_conversation() -> tuple[Conversation, Agent]:
    agent = Agent([RICH_REPLY, "<dial><<</dial>", envelope(suggest("add-note", '{"text":"x"}')), hang])
    conversation = Conversation(agent=agent, domain=Notes(), human=scripted_human(script()), timeout=0.05)
    assert (await conversation.say("start")).status == "awaiting"
    await conversation.claim("sg-3", by="ada")
    await conversation.assign("sg-3", by="ada", person="bea")
    await conversation.claim("sg-3", by="bea")
    await conversation.release("sg-3", by="bea")
    assert (await conversation.decide("sg-3", Dismiss(), by="ada")).status == "idle"
    await conversation.say("more")
    return conversation, agent


async def test_every_event_round_trips_through_json() -> None:
    conversation, _ = await rich_conversation()
    seen = {entry.event.type for entry in conversation.log}
    unseen = {"send-failed", "interrupted", "ended", "turn-limit", "flow-moved"}
    unseen |= {"reply-started", "reply-progress", "reply-cut"}  # a streamed reply's
    unseen |= {"reply-repeated"}  # a call that stops on an unusable reply sent again
    unseen |= {"approval-refused", "approval-waiting", "reminded", "escalated"}  # see test_policy, test_reminders
    assert seen >= set(EVENT_TYPES) - unseen
    for entry in conversation.log:
        data = json.loads(json.dumps(entry_to_dict(entry)))
        assert entry_from_dict(data) == entry
        assert event_from_dict(event_to_dict(entry.event)) == entry.event


async def test_a_store_writes_each_entry_as_its_dict_form() -> None:
    conversation, _ = await rich_conversation()
    for entry in conversation.log:
        assert encode(entry) == json.dumps(entry_to_dict(entry), separators=(",", ":"))
        assert decode(encode(entry)) == entry


def test_an_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event type 'nope'"):
        event_from_dict({"type": "nope"})


def test_each_event_is_tagged_with_its_type() -> None:
    for kind, cls in EVENT_TYPES.items():
        assert cls.__struct_config__.tag == kind
        assert cls.__struct_config__.tag_field == "type"


@pytest.mark.parametrize(
    ("data", "named"),
    [
        pytest.param(
            {"type": "sent", "turn": 1, "message": "hi", "colour": "red"}, "unknown field `colour`", id="unknown"
        ),
        pytest.param(
            {"type": "sent", "turn": "one", "message": "hi"}, "Expected `int`, got `str` - at `$.turn`", id="type"
        ),
        pytest.param({"type": "sent", "message": "hi"}, "missing required field `turn`", id="missing"),
        pytest.param(
            {"type": "ask", "text": "?", "options": [{"value": 1}]}, "at `$.options[0].value`", id="nested"
        ),
    ],
)
def test_an_event_that_is_not_as_declared_is_refused_naming_the_field(data: dict[str, Any], named: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=re.escape(named)):
        event_from_dict(data)


def test_a_stored_entry_whose_event_is_not_as_declared_is_a_log_error_naming_it() -> None:
    with pytest.raises(LogError) as refused:
        entry_from_dict({"seq": 7, "time": 1.0, "event": {"type": "sent", "turn": "one", "message": "hi"}})
    assert (refused.value.seq, refused.value.event_type) == (7, "sent")
    assert "at `$.turn`" in str(refused.value)


def test_a_sent_event_without_a_message_id_is_written_as_before_message_ids() -> None:
    assert event_to_dict(SentEvent(turn=1, message="hi")) == {"type": "sent", "turn": 1, "message": "hi"}
    with_id = SentEvent(turn=1, message="hi", message_id="c/reply-1")
    assert event_to_dict(with_id) == {"type": "sent", "turn": 1, "message": "hi", "message_id": "c/reply-1"}


async def test_a_rebuilt_conversation_behaves_like_the_original() -> None:
    original, _ = await rich_conversation()
    stored = [json.loads(json.dumps(entry_to_dict(entry))) for entry in original.log]
    rebuilt = Conversation(
        agent=Agent([]), domain=Notes(), human=scripted_human([]), log=[entry_from_dict(data) for data in stored]
    )
    assert rebuilt.owed == original.owed
    assert rebuilt.facts == original.facts == {"mood": {"level": 3}}
    assert ConversationState.fold(e.event for e in rebuilt.log) == ConversationState.fold(
        e.event for e in original.log
    )
    continuation = [envelope(suggest("add-note")), "ok"]
    results = []
    for conversation in (original, rebuilt):
        agent = Agent(list(continuation))
        conversation.agent = agent
        conversation.human = scripted_human(["accept"])
        events: list[Any] = []
        conversation.on_event = events.append
        result = await conversation.say("again")
        results.append((result, agent.sent, events))
    assert results[0] == results[1]


async def test_the_log_is_numbered_and_timed() -> None:
    conversation, _ = await rich_conversation()
    assert [entry.seq for entry in conversation.log] == list(range(1, len(conversation.log) + 1))
    times = [entry.time for entry in conversation.log]
    assert times == sorted(times)


async def test_a_log_gives_back_the_entries_it_was_built_from() -> None:
    original, _ = await rich_conversation()
    entries = [entry_from_dict(json.loads(json.dumps(entry_to_dict(entry)))) for entry in original.log]
    rebuilt = Conversation(agent=Agent([]), domain=Notes(), human=scripted_human([]), log=entries)
    assert rebuilt.log == original.log == tuple(entries)
    assert all(kept is given for kept, given in zip(rebuilt.log, entries, strict=True))
    assert original.log[-1] is original.log[-1]  # an entry is made once, then kept


@pytest.mark.parametrize(
    ("cut", "numbered"),
    [(slice(None, 2), True), (slice(1, None), False), (slice(None, None, 2), False)],
    ids=["a-prefix", "no-first-entry", "a-gap"],
)
async def test_a_log_must_number_its_entries_from_1(cut: slice, numbered: bool) -> None:
    original, _ = await rich_conversation()
    entries = list(original.log)[cut]

    def rebuilt() -> Conversation:
        return Conversation(agent=Agent([]), domain=Notes(), human=scripted_human([]), log=entries)

    if numbered:
        assert rebuilt().log[: len(entries)] == tuple(entries)  # then the recovery of the call it cuts short
    else:
        with pytest.raises(ValueError, match="numbers from 1"):
            rebuilt()


async def test_the_log_holds_what_on_event_never_sees() -> None:
    events: list[Any] = []
    stall = Stall()
    agent = Agent([stall])
    conversation = Conversation(agent=agent, domain=Notes(), human=scripted_human([]), on_event=events.append)
    await stall.interrupt(partial(conversation.say, "hi"))
    logged = [entry.event.type for entry in conversation.log]
    assert logged == ["said", "sent", "interrupted", "finished"]
    assert [event.type for event in events] == ["sent"]


def test_an_outcome_event_carries_exactly_the_fields_of_its_outcome_and_the_trigger_that_ended_it() -> None:
    assert issubclass(OutcomeEvent, OutcomeFields) and issubclass(Outcome, OutcomeFields)
    assert Outcome.__struct_fields__ == OutcomeFields.__struct_fields__
    assert OutcomeEvent.__struct_fields__ == (*Outcome.__struct_fields__, "trigger")
    fields = {"preview": "p", "result": {"n": 1}, "error": "e", "code": "c", "field": "f", "hint": "h"}
    outcome = Outcome(id="sg-1", action="a", status="failed", **fields, edited=True, expired=True, reconciled=True)
    assert OutcomeEvent(**msgspec.structs.asdict(outcome)).outcome == outcome
    assert list(event_to_dict(OutcomeEvent(**msgspec.structs.asdict(outcome)))) == [
        "type",
        *Outcome.__struct_fields__,
    ]
    # a field added after logs were first written is left out at its default, so older entries keep their shape
    plain = event_to_dict(OutcomeEvent(id="sg-1", action="a", status="done"))
    assert list(plain) == ["type", *(name for name in Outcome.__struct_fields__ if name != "reconciled")]


#: An event of each type that has a field of a fixed vocabulary.
WORDED: dict[str, Event] = {
    "outcome": OutcomeEvent(id="sg-1", action="a", status="done", trigger="succeed"),
    "decided": DecidedEvent(suggestion_id="sg-1", decision="accept"),
    "deferred": DeferredEvent(subject_id="sg-1", kind="ask"),
    "resumed": ResumedEvent(call="say"),
    "finished": FinishedEvent(status="idle", turns=1),
    "inform": InformEvent(text="Noted.", act="inform"),
    "reply-cut": ReplyCutEvent(turn=1, cause="broken"),
    "approval-refused": ApprovalRefusedEvent(suggestion_id="sg-1", code="not-a-decider", hint="h", decision="say"),
}


def test_the_fixed_vocabularies_are_the_fields_literal_types() -> None:
    assert {kind: set(fields) for kind, fields in VOCABULARIES.items() if fields} == {
        "outcome": {"status", "trigger"},
        "decided": {"decision"},
        "deferred": {"kind"},
        "resumed": {"call"},
        "finished": {"status"},
        "inform": {"act"},
        "reply-cut": {"cause"},
        "approval-refused": {"decision"},
    }
    assert VOCABULARIES["outcome"]["status"] == set(STATUSES)
    assert VOCABULARIES["finished"]["status"] == set(CALL_STATUS.values())
    assert set(WORDED) == {kind for kind, fields in VOCABULARIES.items() if fields}


@pytest.mark.parametrize(
    ("kind", "field"), [(kind, field) for kind, fields in VOCABULARIES.items() for field in sorted(fields)]
)
def test_a_word_outside_its_fields_vocabulary_is_refused_at_every_door(kind: str, field: str) -> None:
    bad = msgspec.structs.replace(WORDED[kind], **{field: "weird"})
    why = f"{field} 'weird' is not one of {', '.join(sorted(VOCABULARIES[kind][field]))}"
    with pytest.raises(msgspec.ValidationError, match=f"^{re.escape(why)}$"):
        event_from_dict(event_to_dict(bad))
    for door in (
        lambda: checked_entry(LogEntry(seq=1, time=1.0, event=bad), 1),
        lambda: decode(encode(LogEntry(seq=1, time=1.0, event=bad))),
    ):
        with pytest.raises(LogError) as refused:
            door()
        assert (refused.value.seq, refused.value.event_type, refused.value.reason) == (1, kind, why)
