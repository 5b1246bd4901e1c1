"""One truth: the fold is the only place a lifecycle rule fires, so the live state is the fold of the log after
every step, and a log that claims what no run could do is refused naming its entry.

Random conversations (replies, decisions, failing actions, cancellations at any effect) are driven through the
core as in ``test_core``; the tamperings are the ones a forged or edited log would try: running a dismissed
suggestion, running a payload nobody proposed, reporting another action's outcome, starting an action twice.
"""

from __future__ import annotations

import copy
import json
from typing import Any
from xml.sax.saxutils import escape

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dial_runtime import Accept, ActionError, Conversation, Defer, Dismiss, Edit, policy_human, scripted_human
from dial_runtime.errors import LogError
from dial_runtime.runtime.core import Call, ConversationCore
from dial_runtime.runtime.effects import (
    Answer,
    Consult,
    Effect,
    Ran,
    Reconcile,
    Replied,
    RunFailed,
    Send,
    Unreconciled,
)
from dial_runtime.runtime.events import ActionStartedEvent, LogEntry, OutcomeEvent, SaidEvent
from dial_runtime.runtime.records import Suggestion
from dial_runtime.runtime.state import fold_log
from dial_runtime.stores import MemoryStore
from dial_runtime.stores.jsonl import check_log, export_jsonl, import_jsonl

from ..fakes import Agent, Notes, envelope, folded, suggest
from ..runtime.test_core import ACK, TEXT, World


class Cancelled(BaseException):
    """What a driver throws into a call it cancels (anyio's cancellation is a BaseException too)."""


ELEMENTS = st.sampled_from(
    [
        suggest("add-note", TEXT),
        suggest("add-note", '{"text": "eggs"}'),
        suggest("add-note", "{}"),
        suggest("remove-note", "{}"),
        suggest("list-notes", "{}"),
        suggest("open-poll", "{}"),
        suggest("fly", "{}"),
        suggest("add-note", TEXT, ident="mine"),  # ids the agent chose: one of its own, one like an assigned one
        suggest("add-note", TEXT, ident="sg-2"),
        "<dial-ask>Which list?</dial-ask>",
        "<dial-inform>Noted.</dial-inform>",
    ]
)
DECISIONS = st.sampled_from([Accept(), Dismiss(), Edit({"text": "tea"}), Edit({}), Defer(), "an answer"])


class RandomWorld(World):
    """Replies from a list (then acknowledgements), a person who never runs out of decisions."""

    def respond(self, effect: Effect) -> object:
        if isinstance(effect, Send):
            return Replied(self.replies.pop(0) if self.replies else ACK)
        if isinstance(effect, Consult):
            choice = self.decisions.pop(0) if self.decisions else Accept()
            if isinstance(effect.question, Suggestion):
                return Answer(Dismiss() if isinstance(choice, str) else choice)
            return Answer(choice if isinstance(choice, (str, Defer)) else "an answer")
        if isinstance(effect, Reconcile):  # the domain tells what became of some runs, not of others
            return (Unreconciled("lost"), Ran({"ok": True}), RunFailed(ActionError("no", code="full")))[
                len(effect.suggestion_id) % 3
            ]
        return super().respond(effect)


class Driver:
    """Drives a core's calls, checking after every effect that the live state is the fold of the log so far; at
    the ``cancel_at``-th effect of the conversation it cancels the call instead of answering it."""

    def __init__(self, core: ConversationCore, world: World, cancel_at: int | None) -> None:
        self.core = core
        self.world = world
        self.cancel_at = cancel_at
        self.effects = 0

    def drive(self, call: Call | None) -> None:
        if call is None:
            return
        value: object = None
        error: BaseException | None = None
        while True:
            try:
                effect = call.send(value) if error is None else call.throw(error)
            except (StopIteration, Cancelled):
                break
            assert folded(self.core) == self.core.state
            self.effects += 1
            error = value = None
            if self.effects == self.cancel_at:
                error = Cancelled()
            else:
                value = self.world.respond(effect)
        assert folded(self.core) == self.core.state


conversations = st.tuples(
    st.lists(st.lists(ELEMENTS, min_size=1, max_size=4), min_size=1, max_size=3),
    st.lists(DECISIONS, max_size=10),
    st.booleans(),
    st.lists(st.sampled_from(["say", "decide", "answer", "resume"]), max_size=4),
    st.none() | st.integers(min_value=1, max_value=40),
)


def run(
    replies: list[list[str]], decisions: list[Any], fail: bool, calls: list[str], cancel_at: int | None
) -> ConversationCore:
    """A random conversation driven to its end (a cancelled call is closed as the next call would)."""
    core = ConversationCore(max_turns=4)
    driver = Driver(
        core, RandomWorld([envelope(*elements) for elements in replies], decisions, fail=fail), cancel_at
    )
    driver.drive(core.say("go"))
    for call in calls:
        driver.drive(core.recover())
        state = core.state
        if call == "decide" and state.pending():
            waiting = state.pending()[0]
            if waiting.id in state.open_suggestions:
                driver.drive(core.decide(waiting.id, Accept(), "ada"))
        elif call == "answer" and state.open_asks:
            driver.drive(core.answer(next(iter(state.open_asks)), "later", "ada"))
        elif call == "resume":
            driver.drive(core.resume())
        elif call == "say":
            driver.drive(core.say("more"))
        assert folded(core) == core.state
    driver.drive(core.recover())
    return core


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations)
def test_the_live_state_is_the_fold_of_the_log_after_every_step(conversation: Any) -> None:
    core = run(*conversation)
    assert folded(core) == core.state


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations)
def test_every_suggestion_the_state_holds_has_an_id_the_numbering_counts_as_used(conversation: Any) -> None:
    # ConversationState.used answers at once for an id it holds a suggestion of: asked without those suggestions,
    # the ids' own rule (the agent's ids, the numbering) must say the same.
    state = run(*conversation).state
    held = [*state.ended_suggestions, *state.open_suggestions]
    ruled = copy.copy(state)
    ruled.ended_suggestions, ruled.open_suggestions = {}, {}
    assert [ident for ident in held if not ruled.used(ident)] == []


# -- tamperings: each must be refused, naming the tampered entry ---------------------------------------------


def entries_of(events: list[Any]) -> list[LogEntry]:
    return [LogEntry(seq=seq, time=1.0, event=event) for seq, event in enumerate(events, start=1)]


def tamper(events: list[Any], how: str, pick: int) -> tuple[list[Any], int] | None:
    """The events with one tampering applied at the ``pick``-th place it can go, and the seq it is at; ``None``
    when this log has no such place."""
    started = [i for i, event in enumerate(events) if isinstance(event, ActionStartedEvent)]
    ended = [i for i, event in enumerate(events) if isinstance(event, OutcomeEvent)]
    dismissed = [
        i for i, event in enumerate(events) if event.type == "decided" and event.decision in ("dismiss", "expire")
    ]
    if how == "foreign payload" and started:
        at = started[pick % len(started)]
        forged = msgspec.structs.replace(events[at], payload={"text": "rm -rf /"})
        return [*events[:at], forged, *events[at + 1 :]], at + 1
    if how == "another action" and ended:
        at = ended[pick % len(ended)]
        forged = msgspec.structs.replace(events[at], action="another-action")
        return [*events[:at], forged, *events[at + 1 :]], at + 1
    if how == "started twice" and started:
        at = started[pick % len(started)]
        return [*events[: at + 1], events[at], *events[at + 1 :]], at + 2
    if how == "run after a dismissal" and dismissed:
        at = dismissed[pick % len(dismissed)]
        decided = events[at]
        proposed = next(e for e in events if e.type == "proposed" and e.id == decided.suggestion_id)
        forged = ActionStartedEvent(
            suggestion_id=proposed.id, action=proposed.action, payload=proposed.payload, preview=""
        )
        return [*events[: at + 1], forged, *events[at + 1 :]], at + 2
    ran = {event.suggestion_id for event in events if isinstance(event, ActionStartedEvent)}
    unfinished = [i for i in ended if events[i].id not in ran]  # a run's own result the fold cannot second-guess
    if how == "done without running" and unfinished:
        at = unfinished[pick % len(unfinished)]
        forged = msgspec.structs.replace(events[at], status="done", code=None, error=None)
        return [*events[:at], forged, *events[at + 1 :]], at + 1
    return None


TAMPERINGS = [
    "foreign payload",
    "another action",
    "started twice",
    "run after a dismissal",
    "done without running",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations, how=st.sampled_from(TAMPERINGS), pick=st.integers(min_value=0, max_value=50))
def test_a_tampered_log_is_refused_naming_the_tampered_entry(conversation: Any, how: str, pick: int) -> None:
    events = [entry.event for entry in run(*conversation).log.entries()]
    tampered = tamper(events, how, pick)
    if tampered is None:
        return
    forged, seq = tampered
    with pytest.raises(LogError) as refused:
        fold_log(entries_of(forged))
    assert refused.value.seq == seq, (how, refused.value)


CORRUPTIONS = st.sampled_from(["drop", "duplicate", "swap"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations, how=CORRUPTIONS, where=st.integers(min_value=0))
def test_a_corrupted_log_folds_whole_or_is_refused_at_its_first_bad_entry(
    conversation: Any, how: str, where: int
) -> None:
    """Dropped, repeated or swapped entries: the log folds, or the error names an entry at or after the damage
    whose predecessors fold (the first entry that cannot stand)."""
    events = [entry.event for entry in run(*conversation).log.entries()]
    index = where % len(events)
    if how == "drop":
        del events[index]
    elif how == "duplicate":
        events.insert(index, events[index])
    elif index + 1 < len(events):
        events[index], events[index + 1] = events[index + 1], events[index]
    log = entries_of(events)
    try:
        fold_log(log)
    except LogError as error:
        assert error.seq is not None and error.seq >= index + 1
        fold_log(log[: error.seq - 1])


# -- the same refusals through every door --------------------------------------------------------------------

TWO_NOTES = envelope(suggest("add-note", TEXT), suggest("remove-note", '{"text": "milk"}'))


def a_real_log() -> list[LogEntry]:
    """add-note accepted and run, remove-note dismissed."""
    core = ConversationCore()
    Driver(core, World([TWO_NOTES, ACK], [Accept(), Dismiss()]), None).drive(core.say("go"))
    return list(core.log.entries())


def _issue_tamperings() -> list[Any]:
    log = a_real_log()
    events = [entry.event for entry in log]
    cases = []
    for how in TAMPERINGS:
        tampered = tamper(events, how, 0)
        assert tampered is not None, how
        forged, seq = tampered
        cases.append(pytest.param(entries_of(forged), seq, id=how))
    return cases


@pytest.mark.parametrize(("entries", "seq"), _issue_tamperings())
def test_a_tampered_log_is_refused_by_every_door(entries: list[LogEntry], seq: int, tmp_path: Any) -> None:
    with pytest.raises(LogError) as folded_error:
        fold_log(entries)
    assert folded_error.value.seq == seq
    with pytest.raises(LogError) as built:
        Conversation(agent=Agent([]), domain=Notes(), human=policy_human(), log=entries)
    assert built.value.seq == seq
    path = tmp_path / "forged.jsonl"
    with path.open("w") as file:
        export_jsonl(entries, file, conversation_id="forged")
    with path.open() as file:
        _, imported = import_jsonl(file)
    with pytest.raises(LogError) as checked:
        check_log(imported)
    assert checked.value.seq == seq


# -- one payload: the payload validated is the one logged, shown and run -------------------------------------


class Witnessing(Notes):
    """Notes that remember every payload validate saw."""

    def __init__(self) -> None:
        super().__init__()
        self.validated: list[Any] = []

    def validate(self, action: str, payload: Any) -> Any:
        self.validated.append(payload)
        return super().validate(action, payload)


def logged_payloads(conversation: Conversation, kind: str) -> list[Any]:
    return [entry.event.payload for entry in conversation.log if entry.event.type == kind]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@pytest.mark.anyio
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=JSON)
@example(payload={"<:": None, "&": "a < b"})  # markup characters, escaped in the reply as XML requires
async def test_the_payload_validated_is_the_payload_logged_and_run(payload: Any) -> None:
    domain = Witnessing()
    reply = envelope(suggest("list-notes", escape(json.dumps(payload))))  # the payload as XML text holds it
    conversation = Conversation(agent=Agent([reply, ACK]), domain=domain, human=policy_human())
    await conversation.say("list")
    (validated,) = domain.validated
    assert validated == payload
    assert logged_payloads(conversation, "proposed") == logged_payloads(conversation, "suggestion") == [payload]
    assert logged_payloads(conversation, "action-started") == [payload]
    assert domain.ran == [("list-notes", payload)]


LONG = "x" * 70_000


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("payload_text", "code"),
    [
        (json.dumps({"text": LONG}), "payload-too-large"),
        ("[" * 40 + "]" * 40, "payload-too-large"),
        ('{"amount": NaN}', "invalid-payload"),
        ('{"amount": Infinity}', "invalid-payload"),
        ('{"text": "\\ud800"}', "invalid-payload"),
    ],
    ids=["a 70,000-character string", "40 levels of nesting", "NaN", "Infinity", "a lone surrogate"],
)
async def test_a_payload_that_cannot_be_kept_whole_is_refused_never_cut(payload_text: str, code: str) -> None:
    domain = Witnessing()
    reply = envelope(suggest("list-notes", payload_text))
    conversation = Conversation(agent=Agent([reply, ACK]), domain=domain, human=policy_human())
    result = await conversation.say("list")
    assert [(outcome.status, outcome.code) for outcome in result.outcomes] == [("invalid", code)]
    (outcome,) = result.outcomes
    if "ud800" in payload_text:
        assert outcome.hint is not None and "UTF-8" in outcome.hint and "nesting" not in outcome.hint
    assert domain.validated == [] and domain.ran == []
    assert logged_payloads(conversation, "suggestion") == logged_payloads(conversation, "action-started") == []


@pytest.mark.anyio
async def test_an_edit_that_cannot_be_kept_whole_is_refused_and_the_shown_payload_still_waits() -> None:
    domain = Witnessing()
    reply = envelope(suggest("add-note", TEXT))
    conversation = Conversation(agent=Agent([reply, ACK]), domain=domain, human=scripted_human(["defer"]))
    await conversation.say("add")
    result = await conversation.decide("sg-1", Edit({"text": LONG}))
    assert result.status == "awaiting"
    (waiting,) = conversation.pending
    assert waiting.payload == {"text": "milk"} and waiting.issue is not None
    assert waiting.issue.code == "payload-too-large"
    assert domain.ran == [] and logged_payloads(conversation, "decided") == []
    await conversation.decide("sg-1", Accept())
    assert domain.ran == [("add-note", {"text": "milk"})]


EDITS_NOT_KEPT = [
    ({"text": "\ud800"}, "invalid-payload", "UTF-8"),
    ({"text": ("milk",)}, "invalid-payload", "tuple"),
    ({1: "milk"}, "invalid-payload", "not a string"),
    ({"text": {"milk"}}, "invalid-payload", "set"),
    ({"amount": float("nan")}, "invalid-payload", "nan"),
    ({"text": LONG}, "payload-too-large", "send a smaller one"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("edited", "code", "said"), EDITS_NOT_KEPT, ids=[case[2] for case in EDITS_NOT_KEPT])
async def test_an_edit_is_refused_with_its_real_reason(edited: Any, code: str, said: str) -> None:
    conversation = Conversation(
        agent=Agent([envelope(suggest("add-note", TEXT)), ACK]),
        domain=Witnessing(),
        human=scripted_human(["defer"]),
    )
    await conversation.say("add")
    await conversation.decide("sg-1", Edit(edited))
    (waiting,) = conversation.pending
    assert waiting.issue is not None and (waiting.issue.code, said in (waiting.issue.hint or "")) == (code, True)


# -- a bad tail changes nothing ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_stored_tail_that_cannot_fold_changes_nothing_and_names_its_bad_entry() -> None:
    """Another writer appends a valid ``said`` and an impossible ``outcome``: the conversation keeps the state of
    the log it had, says it is stuck on the bad entry, and every later call names that entry, not the ``said``."""
    store = MemoryStore()
    conversation = await Conversation.open(
        store, "c", agent=Agent([envelope(suggest("add-note", TEXT)), ACK]), domain=Notes(), human=policy_human()
    )
    await conversation.say("add milk")
    good = list(conversation.log)
    state_before = conversation.pending, conversation.owed, conversation.facts
    bad = OutcomeEvent(id="sg-1", action="add-note", status="done")
    tail = [
        LogEntry(seq=len(good) + 1, time=2.0, event=SaidEvent(text="more")),
        LogEntry(seq=len(good) + 2, time=2.0, event=bad),
    ]
    await store.append("c", tail, expected_seq=len(good))
    for _ in range(2):
        with pytest.raises(LogError) as refused:
            await conversation.say("again")
        assert refused.value.seq == len(good) + 2
        assert list(conversation.log) == good
        assert (conversation.pending, conversation.owed, conversation.facts) == state_before
        assert conversation.stuck is not None and conversation.stuck.seq == len(good) + 2
    with pytest.raises(LogError) as reopened:
        await Conversation.open(store, "c", agent=Agent([]), domain=Notes(), human=policy_human())
    assert reopened.value.seq == len(good) + 2
