"""The conversation core on its own: calls driven by lists of inputs, with no event loop and no I/O.

Each case is a reply, what the domain and the person answer, and what the call must come to. The same core runs
under the anyio driver in every other test; here nothing but the core's own decisions is in play.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from dial_runtime import Accept, ActionSpec, Defer, Dismiss, Edit, Issue, Say
from dial_runtime.errors import DialError
from dial_runtime.runtime.core import Call, ConversationCore
from dial_runtime.runtime.effects import (
    Answer,
    AwaitPerson,
    Consult,
    ConsultRules,
    Effect,
    GetContext,
    LookUp,
    Ran,
    Reconcile,
    Replied,
    Review,
    Reviewed,
    RunAction,
    RunFailed,
    Send,
    Thinking,
    Unreconciled,
)
from dial_runtime.runtime.records import RuleVerdict, Suggestion, TurnResult
from dial_runtime.statemachines import LIFE, TURN_LOOP

from ..fakes import envelope, suggest

SPECS = {
    "add-note": ActionSpec(mutates=True),
    "remove-note": ActionSpec(mutates=True, destructive=True),
    "list-notes": ActionSpec(mutates=False),
    "open-poll": ActionSpec(mutates=False, handoff=True),
}
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")


class World:
    """Answers the core's effects the way a driver would: replies from a list, a domain that refuses payloads
    without ``text``, and a person following a script of decisions."""

    def __init__(
        self,
        replies: list[str],
        decisions: list[Any] = (),  # type: ignore[assignment]
        *,
        fail: bool = False,
        rules: Mapping[str, RuleVerdict] | None = None,
    ) -> None:
        self.rules = rules or {}
        self.replies = list(replies)
        self.decisions = list(decisions)
        self.fail = fail
        self.effects: list[Effect] = []
        self.ran: list[tuple[str, Any]] = []

    def respond(self, effect: Effect) -> object:
        self.effects.append(effect)
        if isinstance(effect, GetContext):
            return None
        if isinstance(effect, Send):
            return Replied(self.replies.pop(0))
        if isinstance(effect, LookUp):
            return SPECS.get(effect.action)
        if isinstance(effect, Review):
            payload = effect.payload
            if effect.action == "add-note" and not (isinstance(payload, dict) and payload.get("text")):
                return Reviewed(Issue(code="missing-text", field="text", hint="Give the note's text."))
            return Reviewed(None, f"{effect.action} {effect.payload}" if effect.preview else "")
        if isinstance(effect, ConsultRules):
            return self.rules.get(effect.action)
        if isinstance(effect, Consult):
            return Answer(self.decisions.pop(0))
        if isinstance(effect, RunAction):
            self.ran.append((effect.action, effect.payload))
            return RunFailed(RuntimeError("disk full")) if self.fail else Ran({"ok": True})
        if isinstance(effect, Reconcile):  # a domain with no reconcile: the effect stays unknown
            return Unreconciled("no reconcile")
        raise AssertionError(f"unexpected effect {effect!r}")


def drive(call: Call | None, world: World) -> TurnResult:
    """Run a call to its end, answering every effect from ``world``."""
    assert call is not None
    value: object = None
    while True:
        try:
            effect = call.send(value)
        except StopIteration as stop:
            result: TurnResult = stop.value
            return result
        value = world.respond(effect)


def outcomes(result: TurnResult) -> list[tuple[str, str, str | None]]:
    return [(outcome.id, outcome.status, outcome.code) for outcome in result.outcomes]


TEXT = '{"text": "milk"}'

CASES: list[tuple[str, str, list[Any], str, list[tuple[str, str, str | None]]]] = [
    ("accepted", envelope(suggest("add-note", TEXT)), [Accept()], "idle", [("sg-1", "done", None)]),
    ("dismissed", envelope(suggest("add-note", TEXT)), [Dismiss()], "idle", [("sg-1", "dismissed", None)]),
    ("read-only runs unasked", envelope(suggest("list-notes", "{}")), [], "idle", [("sg-1", "done", None)]),
    ("hand-off runs unasked", envelope(suggest("open-poll", "{}")), [], "idle", [("sg-1", "handed-off", None)]),
    (
        "unknown action",
        envelope(suggest("fly", "{}")),
        [],
        "idle",
        [("sg-1", "invalid", "unknown-action")],
    ),
    ("refused payload", envelope(suggest("add-note", "{}")), [], "idle", [("sg-1", "invalid", "missing-text")]),
    (
        "payload not JSON",
        envelope(suggest("add-note", "{nope")),
        [],
        "idle",
        [("sg-1", "invalid", "invalid-payload")],
    ),
    (
        "an edit refused three times",
        envelope(suggest("add-note", TEXT)),
        [Edit({}), Edit({}), Edit({})],
        "idle",
        [("sg-1", "invalid", "missing-text")],
    ),
    (
        "an edit refused, then accepted",
        envelope(suggest("add-note", TEXT)),
        [Edit({}), Edit({"text": "eggs"})],
        "idle",
        [("sg-1", "done", None)],
    ),
    (
        "say something else supersedes the rest of the reply",
        envelope(suggest("add-note", TEXT), suggest("remove-note", "{}")),
        [Say("no, wait")],
        "idle",
        [("sg-1", "superseded", None), ("sg-2", "superseded", None)],
    ),
    ("deferred", envelope(suggest("add-note", TEXT)), [Defer()], "awaiting", []),
    (
        "an agent id used twice in one reply",
        envelope(suggest("add-note", TEXT, ident="x"), suggest("add-note", TEXT, ident="x")),
        [Accept()],
        "idle",
        [("x", "done", None), ("sg-1", "invalid", "duplicate-id")],
    ),
    (
        "an assigned id skips an id the agent used",
        envelope(suggest("list-notes", "{}", ident="sg-1"), suggest("list-notes", "{}")),
        [],
        "idle",
        [("sg-1", "done", None), ("sg-2", "done", None)],
    ),
    (
        "an agent id that an assigned one took",
        envelope(suggest("list-notes", "{}"), suggest("list-notes", "{}", ident="sg-1")),
        [],
        "idle",
        [("sg-1", "done", None), ("sg-2", "invalid", "duplicate-id")],
    ),
]


@pytest.mark.parametrize(
    ("reply", "decisions", "status", "expected"),
    [
        pytest.param(reply, decisions, status, expected, id=name)
        for name, reply, decisions, status, expected in CASES
    ],
)
def test_a_call_comes_to_its_outcomes(
    reply: str, decisions: list[Any], status: str, expected: list[tuple[str, str, str | None]]
) -> None:
    core = ConversationCore()
    world = World([reply, ACK, ACK], decisions)
    result = drive(core.say("go"), world)
    assert (result.status, outcomes(result)) == (status, expected)
    assert world.decisions == []
    assert not core.state.in_call
    if status == "awaiting":
        assert [each.id for each in result.pending] == ["sg-1"]
        assert TURN_LOOP.allowed(core.state.loop) == {"resume", "cancel"}


def test_nothing_runs_before_its_review_and_every_valid_payload_is_validated_again_before_it_runs() -> None:
    world = World([envelope(suggest("add-note", TEXT)), ACK], [Accept()])
    drive(ConversationCore().say("go"), world)
    kinds = [type(effect).__name__ for effect in world.effects]
    assert kinds == [
        "GetContext",
        "Send",
        "LookUp",
        "Review",
        "ConsultRules",
        "Consult",
        "Review",
        "RunAction",
        "GetContext",
        "Send",
    ]


def test_an_action_that_raises_ends_failed_with_only_its_type() -> None:
    world = World([envelope(suggest("add-note", TEXT)), ACK], [Accept()], fail=True)
    result = drive(ConversationCore().say("go"), world)
    (outcome,) = result.outcomes
    assert (outcome.status, outcome.error, outcome.code) == (
        "failed", "the action raised RuntimeError", "unexpected-error",
    )  # fmt: skip


def test_asks_with_a_repeated_id_get_an_id_of_their_own() -> None:
    reply = envelope(
        '<dial-ask id="q">Which list?</dial-ask>',
        '<dial-ask id="q">Which colour?</dial-ask>',
        "<dial-ask>Why?</dial-ask>",
    )
    world = World([reply, ACK], ["groceries", "red", "because"])
    core = ConversationCore()
    drive(core.say("go"), world)
    asked = [effect.question.id for effect in world.effects if isinstance(effect, Consult)]
    assert asked == ["q", "ask-1", "ask-2"]


def test_a_deferred_decision_taken_later_carries_on() -> None:
    core = ConversationCore()
    waiting = drive(core.say("go"), World([envelope(suggest("add-note", TEXT))], [Defer()]))
    assert waiting.status == "awaiting"
    with pytest.raises(DialError, match="'sg-9' is not awaiting a decision"):
        core.decide("sg-9", Accept(), "ada")
    result = drive(core.decide("sg-1", Accept(), "ada"), World([ACK]))
    assert (result.status, outcomes(result)) == ("idle", [("sg-1", "done", None)])
    decided = [entry.event for entry in core.log.entries() if entry.event.type == "decided"]
    assert [(event.decision, event.by) for event in decided] == [("accept", "ada")]


def test_new_words_supersede_what_waits_for_the_person() -> None:
    core = ConversationCore()
    drive(core.say("go"), World([envelope(suggest("add-note", TEXT))], [Defer()]))
    result = drive(core.say("never mind"), World([ACK]))
    assert result.status == "idle"
    assert [(o.id, o.status) for o in core.state.owed_outcomes] == []
    sent = [entry.event for entry in core.log.entries() if entry.event.type == "sent"]
    assert "sg-1:superseded" in sent[-1].message and "never mind" in sent[-1].message


def _thrown(error: BaseException) -> Callable[[Call, World], Iterator[str]]:
    def run(call: Call, world: World) -> Iterator[str]:
        value: object = None
        while True:
            effect = call.send(value)
            if isinstance(effect, Consult):
                yield "consulted"
                call.throw(error)
            value = world.respond(effect)

    return run


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("the person's callback broke")])
def test_an_error_thrown_in_while_the_person_decides_closes_the_call(error: BaseException) -> None:
    core = ConversationCore()
    call = core.say("go")
    world = World([envelope(suggest("add-note", TEXT), suggest("remove-note", "{}"))])
    with pytest.raises(type(error)):
        list(_thrown(error)(call, world))
    assert [(o.id, o.status) for o in core.state.owed_outcomes] == [("sg-1", "superseded"), ("sg-2", "superseded")]
    assert core.state.life == LIFE.initial and TURN_LOOP.is_final(core.state.loop)
    finished = core.log.events[-1]
    assert finished.type == "finished" and finished.status == "interrupted"
    interrupted = next(event for event in core.log.events if event.type == "interrupted")
    expected = "interrupted by the person (Ctrl-C)" if isinstance(error, KeyboardInterrupt) else "RuntimeError"
    assert interrupted.reason.startswith(expected)


def test_an_answer_that_must_be_awaited_is_awaited_once_the_log_can_be_written() -> None:
    core = ConversationCore(decide_timeout=5.0, clock=lambda: 100.0)
    call = core.say("go")
    world = World([envelope(suggest("add-note", TEXT)), ACK])
    value: object = None
    seen: list[Effect] = []
    while True:
        try:
            effect = call.send(value)
        except StopIteration:
            break
        seen.append(effect)
        if isinstance(effect, Consult):
            value = Thinking()
        elif isinstance(effect, AwaitPerson):
            assert effect.durable and effect.deadline == 5.0
            value = Answer(Accept())
        else:
            value = world.respond(effect)
    assert [type(e).__name__ for e in seen[5:7]] == ["Consult", "AwaitPerson"]
    assert Send.durable and RunAction.durable and not Consult.durable


def test_a_suggestion_shown_to_the_person_is_the_one_validated() -> None:
    world = World([envelope(suggest("add-note", TEXT)), ACK], [Accept()])
    drive(ConversationCore().say("go"), world)
    (asked,) = [effect for effect in world.effects if isinstance(effect, Consult)]
    assert asked.question == Suggestion(
        id="sg-1", action="add-note", payload={"text": "milk"}, preview="add-note {'text': 'milk'}", mutates=True
    )


def test_a_call_on_an_ended_conversation_sends_nothing() -> None:
    core = ConversationCore()
    core.end("end() was called")
    world = World([])
    result = drive(core.say("hello?"), world)
    assert (result.status, result.turns, world.effects) == ("ended", 0, [])
    assert core.state.life == "ended"


def test_nothing_to_say_is_idle_at_once() -> None:
    core = ConversationCore()
    world = World([])
    assert drive(core.say(""), world).status == "idle"
    assert world.effects == []
    assert core.resume() is None


def test_the_driver_answers_exactly_the_immediate_effects_at_once() -> None:
    """The driver dispatches an effect on its class: every immediate effect is answered at once, every other one
    is performed (EndStream only ends the reading of a stream, which waits for it)."""
    from dial_runtime.driver.conversation import _ANSWERS, _PERFORMERS
    from dial_runtime.runtime import effects

    kinds = {
        kind
        for kind in vars(effects).values()
        if isinstance(kind, type) and issubclass(kind, Effect) and kind is not Effect
    }
    assert set(_ANSWERS) == {kind for kind in kinds if kind.immediate}
    assert set(_PERFORMERS) == {kind for kind in kinds if not kind.immediate} - {effects.EndStream}
