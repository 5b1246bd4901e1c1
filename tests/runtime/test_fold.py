"""The fold trusts nothing: a log no run of the runtime could have written raises LogError naming its entry.

Logs are made by real runs of the core (driven as in ``test_core``), then folded back, or corrupted first.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dial_runtime import Accept, Conversation, Defer, Dismiss, Edit, Say, policy_human
from dial_runtime.errors import LogError
from dial_runtime.runtime.core import ConversationCore
from dial_runtime.runtime.events import (
    EVENT_TYPES,
    ActionStartedEvent,
    AskEvent,
    DecidedEvent,
    DeclareEvent,
    DelegateEvent,
    ExecuteEvent,
    InformEvent,
    LogEntry,
    OutcomeEvent,
    PhaticEvent,
    ProposedEvent,
    ReplyEvent,
    ReplyRefusedEvent,
    SaidEvent,
    SentEvent,
    UnconfirmedEvent,
    event_from_dict,
    event_to_dict,
)
from dial_runtime.runtime.state import _APPLY, NO_ENTRIES, ConversationState, _Refusal, fold_log

from ..fakes import Agent, Notes, envelope, folded, suggest
from .test_core import ACK, TEXT, World, drive
from .test_flow_conversations import RULES


def stored(core: ConversationCore) -> list[LogEntry]:
    return list(core.log.entries())


def a_log() -> list[LogEntry]:
    """A conversation with a run, a dismissal, a refused edit, a deferral taken later and an answered ask."""
    core = ConversationCore()
    first = envelope(
        suggest("add-note", TEXT),
        suggest("remove-note", "{}"),
        suggest("add-note", TEXT),
        '<dial-ask id="q">Which list?</dial-ask>',
    )
    drive(core.say("go"), World([first, ACK], [Accept(), Dismiss(), Edit({}), Defer(), "groceries"]))
    drive(core.decide("sg-3", Edit({"text": "eggs"}), "ada"), World([ACK]))
    return stored(core)


def seq_of(entries: list[LogEntry], kind: str, **fields: Any) -> int:
    return next(
        entry.seq
        for entry in entries
        if entry.event.type == kind and all(getattr(entry.event, k) == v for k, v in fields.items())
    )


class Unknown(msgspec.Struct, frozen=True, kw_only=True):
    """An event-like record of a type no run of the runtime writes."""

    type: ClassVar[str] = "unknown-kind"
    text: str


def replaced(entries: list[LogEntry], seq: int, event: Any) -> list[LogEntry]:
    return [msgspec.structs.replace(entry, event=event) if entry.seq == seq else entry for entry in entries]


def renumbered(entries: list[LogEntry]) -> list[LogEntry]:
    return [msgspec.structs.replace(entry, seq=index) for index, entry in enumerate(entries, start=1)]


def test_a_real_log_folds_back_to_the_same_state() -> None:
    core = ConversationCore()
    drive(core.say("go"), World([envelope(suggest("add-note", TEXT)), ACK], [Accept()]))
    state = ConversationState()
    fold_log(stored(core), state)
    assert state == core.state


def test_a_new_state_sets_every_field() -> None:
    """The state's ``__init__`` is written out: a field it forgot would be missing on every new conversation."""
    state = ConversationState()
    assert all(hasattr(state, field.name) for field in attrs.fields(ConversationState))
    assert ConversationState(flow=RULES.table).flow_state == RULES.table.initial


def test_the_fold_takes_every_kind_of_event() -> None:
    assert set(_APPLY) == set(EVENT_TYPES)


#: An event of every kind that says which element of the reply it comes from, at element 5.
PLACED_EVENTS = [
    AskEvent(id="q", text="Which list?", element=5),
    DeclareEvent(context_key="list", value="groceries", element=5),
    DelegateEvent(to="billing", element=5),
    ExecuteEvent(element=5),
    InformEvent(text="Hello.", element=5),
    PhaticEvent(signal="greeting", element=5),
    ProposedEvent(id="sg-1", action="add-note", payload={}, numbered=True, element=5),
    ReplyRefusedEvent(turn=1, reply_id="reply-1", reason="unusable", element=5),
    UnconfirmedEvent(reason="no such suggestion", element=5),
]


def test_every_kind_of_event_that_has_an_element_is_placed() -> None:
    assert {event.type for event in PLACED_EVENTS} == {
        kind for kind, cls in EVENT_TYPES.items() if "element" in cls.__struct_fields__
    }


@pytest.mark.parametrize("event", PLACED_EVENTS, ids=lambda event: event.type)
def test_an_event_moves_the_cursor_to_its_element_and_never_back(event: Any) -> None:
    """A resumed call carries on after the last element the log accounts for, whatever kind of event did."""
    state = ConversationState.fold(
        [SaidEvent(text="go"), SentEvent(turn=1, message="go"), ReplyEvent(turn=1, text="<dial></dial>")]
    )
    state.apply(event)
    assert state.cursor == 5
    state.apply(InformEvent(text="Earlier.", element=2))
    assert state.cursor == 5


def _corruptions() -> list[Any]:
    log = a_log()
    done = seq_of(log, "outcome", id="sg-1")
    pending = seq_of(log, "suggestion", id="sg-2")
    proposed = seq_of(log, "proposed", id="sg-2")
    decided = seq_of(log, "decided", suggestion_id="sg-2")
    sent = seq_of(log, "sent", turn=1)
    outcome = log[done - 1].event
    cases = [
        ("an outcome for an unknown id", replaced(log, done, msgspec.structs.replace(outcome, id="sg-9")), done),
        ("an unknown status", replaced(log, done, msgspec.structs.replace(outcome, status="exploded")), done),
        (
            "done for a suggestion that never ran",
            [
                *log[:pending],
                LogEntry(seq=pending + 1, time=1.0, event=msgspec.structs.replace(outcome, id="sg-2")),
            ],
            pending + 1,
        ),
        (
            "an action-started for a suggestion that is not running",
            [
                *log[:proposed],
                LogEntry(
                    seq=proposed + 1,
                    time=1.0,
                    event=ActionStartedEvent(suggestion_id="sg-2", action="remove-note", payload={}, preview=""),
                ),
            ],
            proposed + 1,
        ),
        (
            "a decision for a suggestion that is not pending",
            [
                *log[:done],
                LogEntry(seq=done + 1, time=1.0, event=DecidedEvent(suggestion_id="sg-1", decision="accept")),
            ],
            done + 1,
        ),
        (
            "a decision nobody can make",
            replaced(log, decided, msgspec.structs.replace(log[decided - 1].event, decision="maybe")),
            decided,
        ),
        ("a field of the wrong type", replaced(log, sent, SentEvent(turn="one", message="hi")), sent),  # type: ignore[arg-type]
        ("a gap in seq", [*log[:3], *log[4:]], 5),
        ("a repeated seq", [*log[:4], log[3], *log[4:]], 4),
        ("a time that is not a number", [*log[:2], msgspec.structs.replace(log[2], time=math.nan), *log[3:]], 3),
        (
            "a message sent after the conversation ended",
            renumbered(
                [
                    *log,
                    LogEntry(seq=0, time=1.0, event=event_from_dict({"type": "ended", "reason": "end()"})),
                    LogEntry(seq=0, time=1.0, event=event_from_dict({"type": "said", "text": "hi"})),
                    LogEntry(seq=0, time=1.0, event=SentEvent(turn=1, message="hi")),
                ]
            ),
            len(log) + 3,
        ),
        (
            "an event between calls",
            renumbered([*log, LogEntry(seq=0, time=1.0, event=SentEvent(turn=3, message="hi"))]),
            len(log) + 1,
        ),
        (
            "an event of a type the runtime does not know",
            renumbered([*log[:sent], LogEntry(seq=0, time=1.0, event=Unknown(text="hi")), *log[sent:]]),  # type: ignore[arg-type]
            sent + 1,
        ),
        (
            "a suggestion id proposed twice",
            renumbered([*log[:done], log[seq_of(log, "proposed", id="sg-1") - 1], *log[done:]]),
            done + 1,
        ),
    ]
    return [pytest.param(entries, seq, id=name) for name, entries, seq in cases]


@pytest.mark.parametrize(("entries", "seq"), _corruptions())
def test_an_impossible_log_is_refused_naming_its_entry(entries: list[LogEntry], seq: int) -> None:
    with pytest.raises(LogError) as refused:
        fold_log(entries)
    assert refused.value.seq == seq
    with pytest.raises(LogError, match=f"log entry {seq}"):
        Conversation(agent=Agent([]), domain=Notes(), human=policy_human(), log=entries)


def test_the_log_error_names_the_entry_its_type_and_why() -> None:
    log = a_log()
    done = seq_of(log, "outcome", id="sg-1")
    bad = replaced(log, done, msgspec.structs.replace(log[done - 1].event, status="exploded"))
    with pytest.raises(LogError) as refused:
        fold_log(bad)
    assert (refused.value.seq, refused.value.event_type) == (done, "outcome")
    why = "status 'exploded' is not one of dismissed, done, failed, handed-off, invalid, superseded"
    assert str(refused.value) == f"log entry {done} (outcome): {why}"
    assert isinstance(refused.value, ValueError)


def test_an_event_of_an_unknown_type_is_named_as_such() -> None:
    log = a_log()
    sent = seq_of(log, "sent", turn=1)
    odd = renumbered([*log[:sent], LogEntry(seq=0, time=1.0, event=Unknown(text="hi")), *log[sent:]])  # type: ignore[arg-type]
    with pytest.raises(
        LogError, match=f"log entry {sent + 1} \\(unknown-kind\\): unknown event type 'unknown-kind'"
    ):
        fold_log(odd)


class Impostor(msgspec.Struct, frozen=True, kw_only=True):
    """A record that claims a type of the log's without being its event."""

    type: ClassVar[str] = "said"
    text: str
    by: str | None = None


def test_a_record_that_only_claims_an_events_type_is_refused() -> None:
    log = a_log()
    ended = len(log)
    odd = [*log, LogEntry(seq=ended + 1, time=1.0, event=Impostor(text="hi"))]  # type: ignore[arg-type]
    with pytest.raises(
        LogError, match=f"log entry {ended + 1} \\(said\\): Impostor is not the log's 'said' event"
    ):
        fold_log(odd)


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (SentEvent(turn=1, message="hi"), "a 'sent' happens only during a call"),
        (Impostor(text="hi"), "Impostor is not the log's 'said' event"),
    ],
    ids=["not-admitted-between-calls", "an-impostor"],
)
def test_the_core_records_nothing_the_state_does_not_admit(event: Any, why: str) -> None:
    # record() looks the handler up itself: what it does not find is refused as the fold refuses it.
    core = ConversationCore()
    drive(core.say("hello"), World([envelope("<dial-inform>Hi.</dial-inform>")]))
    before, state = list(core.log.entries()), core.state
    with pytest.raises(_Refusal, match=why):
        core.record(event)
    assert core.log.entries() == before and core.state is state and folded(core) == state


# --- random conversations, and random corruptions of their logs ------------------------------------------------

ELEMENTS = st.sampled_from(
    [
        suggest("add-note", TEXT),
        suggest("add-note", "{}"),
        suggest("remove-note", "{}"),
        suggest("list-notes", "{}"),
        suggest("open-poll", "{}"),
        suggest("fly", "{}"),
        suggest("add-note", TEXT, ident="x"),
        "<dial-ask>Which list?</dial-ask>",
        "<dial-inform>Noted.</dial-inform>",
        '<dial-declare context-key="mood">"fine"</dial-declare>',
    ]
)
DECISIONS = st.sampled_from(
    [Accept(), Dismiss(), Edit({"text": "eggs"}), Edit({}), Say("something else"), Defer(), "an answer", ""]
)


class RandomWorld(World):
    """A world whose person picks from a list that never runs out, and whose actions fail when told."""

    def __init__(self, replies: list[str], decisions: list[Any], fail: bool) -> None:
        super().__init__(replies, decisions, fail=fail)

    def respond(self, effect: Any) -> object:
        from dial_runtime.runtime.effects import Answer, Consult, Replied, Send
        from dial_runtime.runtime.records import Suggestion

        if isinstance(effect, Send):
            return Replied(self.replies.pop(0) if self.replies else ACK)
        if isinstance(effect, Consult):
            choice = self.decisions.pop(0) if self.decisions else Accept()
            is_suggestion = isinstance(effect.question, Suggestion)
            if is_suggestion and isinstance(choice, str):
                choice = Dismiss()
            elif not is_suggestion and not isinstance(choice, (str, Defer)):
                choice = "an answer"
            return Answer(choice)
        return super().respond(effect)


conversations = st.tuples(
    st.lists(st.lists(ELEMENTS, min_size=1, max_size=5), min_size=1, max_size=4),
    st.lists(DECISIONS, max_size=12),
    st.booleans(),
    st.lists(st.sampled_from(["say", "decide", "answer", "resume"]), max_size=4),
)


def hold(replies: list[list[str]], decisions: list[Any], fail: bool, calls: list[str]) -> ConversationCore:
    core = ConversationCore(max_turns=4)
    world = RandomWorld([envelope(*elements) for elements in replies], decisions, fail)
    drive(core.say("go"), world)
    for call in calls:
        state = core.state
        if call == "decide" and state.pending():
            waiting = state.pending()[0]
            if waiting.id in state.open_suggestions:
                drive(core.decide(waiting.id, Accept(), "ada"), world)
        elif call == "answer" and state.open_asks:
            drive(core.answer(next(iter(state.open_asks)), "later", "ada"), world)
        elif call == "resume":
            resumed = core.resume()
            if resumed is not None:
                drive(resumed, world)
        elif call == "say":
            drive(core.say("more"), world)
    return core


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations)
def test_every_log_a_run_writes_folds_back_to_the_same_state(conversation: Any) -> None:
    core = hold(*conversation)
    state = ConversationState()
    fold_log(stored(core), state)
    assert state == core.state


CORRUPTIONS = st.sampled_from(["drop", "duplicate", "swap", "retype", "restatus"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations, how=CORRUPTIONS, where=st.integers(min_value=0), data=st.data())
def test_a_corrupted_log_folds_whole_or_is_refused_at_its_first_bad_entry(
    conversation: Any, how: str, where: int, data: st.DataObject
) -> None:
    """Whatever the damage, the log folds, or the error names an entry at or after it whose predecessors all
    fold: the first entry that cannot stand. An outcome given a status its suggestion cannot end with is
    always refused, naming that outcome."""
    entries = stored(hold(*conversation))
    index = where % len(entries)
    events = [entry.event for entry in entries]
    must_refuse = False
    if how == "drop":
        del events[index]
    elif how == "duplicate":
        events.insert(index, events[index])
    elif how == "swap" and index + 1 < len(events):
        events[index], events[index + 1] = events[index + 1], events[index]
    elif how == "retype":
        fields = event_to_dict(events[index])
        fields["type"] = data.draw(st.sampled_from(sorted(EVENT_TYPES)))
        try:
            events[index] = event_from_dict(fields)
        except (TypeError, ValueError):
            return
    elif how == "restatus":
        outcomes = [i for i, event in enumerate(events) if isinstance(event, OutcomeEvent)]
        if not outcomes:
            return
        index = outcomes[index % len(outcomes)]
        status = data.draw(st.sampled_from(["done", "failed", "invalid", "dismissed", "superseded", "exploded"]))
        original = events[index].status
        ident = events[index].id
        ran = any(isinstance(e, ActionStartedEvent) and e.suggestion_id == ident for e in events)
        shown = [e for e in events if e.type == "suggestion" and e.id == ident]
        succeeded = "handed-off" if shown and shown[0].handoff else "done"
        # The domain's word is not second-guessed (a run's result; a review that refused a suggestion never
        # shown, or an interruption before it): only what contradicts the lifecycle is caught.
        told = {succeeded, "failed"} if ran else {"invalid", "superseded"} if not shown else set()
        must_refuse = status != original and not {status, original} <= told
        events[index] = msgspec.structs.replace(events[index], status=status)
    log = [LogEntry(seq=seq, time=1.0, event=event) for seq, event in enumerate(events, start=1)]
    try:
        fold_log(log)
    except LogError as error:
        assert error.seq is not None and error.seq >= index + 1, error
        if must_refuse:
            assert error.seq == index + 1, error
        fold_log(log[: error.seq - 1])
    else:
        assert not must_refuse, f"an outcome restated {status!r} folded"


def test_a_state_without_asks_suggestions_or_facts_holds_the_shared_empty_mapping() -> None:
    """Empty, a state holds no dict of its own for its asks, open suggestions or facts (64 bytes each a finished
    conversation keeps); the shared one refuses entries, and a state that gets one gets a dict of its own."""
    one, two = ConversationState(), ConversationState()
    for name in ("asked", "open_asks", "open_suggestions", "facts"):
        assert getattr(one, name) is NO_ENTRIES is getattr(two, name)
    with pytest.raises(TypeError):
        NO_ENTRIES["x"] = 1
    with pytest.raises(TypeError):
        NO_ENTRIES.setdefault("x", 1)
    with pytest.raises(TypeError):
        NO_ENTRIES.update(x=1)
    assert NO_ENTRIES == {}
