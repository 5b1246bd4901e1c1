"""The lifecycle machines: their compiled tables agree with their declarations and follow the contract."""

from __future__ import annotations

import itertools
import typing
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st
from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from dial_runtime.errors import IllegalTransition
from dial_runtime.statemachines import (
    BETWEEN_CALLS,
    CALL,
    CALL_STATUS,
    CARD_HOLDING,
    CLAIM,
    CLAIM_REFUSALS,
    DECIDING,
    DECISION,
    DECISION_REFUSALS,
    ENDED,
    FINAL_STATE,
    IN_CALL,
    LIFE,
    NEEDS_REPLY,
    OUTCOME_STATUS,
    RUNNING,
    SUGGESTION,
    TURN_LOOP,
    CallGate,
    CallStatus,
    ClaimRules,
    ClaimVerdict,
    ConversationLife,
    DecisionRules,
    DecisionVerdict,
    LifeState,
    LoopState,
    OutcomeStatus,
    SuggestionLifecycle,
    SuggestionState,
    Table,
    Transition,
    TurnLoop,
    compile_machine,
)


class Guarded(StateMachine):
    """A machine using the guard forms the lifecycle machines do not: several conds, and unless."""

    start = State(initial=True)
    left = State()
    right = State()
    stop = State(final=True)

    go = start.to(left, cond=["a", "b"]) | start.to(right, unless="a") | left.to(right, cond="b", unless="c")
    back = left.to(start) | right.to(start, cond="c")
    halt = stop.from_(start, left, right, unless="b")


GUARDED = compile_machine(Guarded)

MACHINES = [
    pytest.param(SuggestionLifecycle, SUGGESTION, id="suggestion"),
    pytest.param(TurnLoop, TURN_LOOP, id="turn_loop"),
    pytest.param(ConversationLife, LIFE, id="life"),
    pytest.param(CallGate, CALL, id="call"),
    pytest.param(DecisionRules, DECISION, id="decision"),
    pytest.param(ClaimRules, CLAIM, id="claim"),
    pytest.param(Guarded, GUARDED, id="guarded"),
]
TABLES = [pytest.param(table, id=table.name) for table in (SUGGESTION, TURN_LOOP, LIFE, CALL, DECISION, CLAIM)]


class Flags:
    """The declared machine's model: its guards read these attributes."""

    def __init__(self, names: frozenset[str]) -> None:
        for name in names:
            setattr(self, name, False)


# -- the table and the declared machine agree ----------------------------------------------------------------


@pytest.mark.parametrize(("cls", "table"), MACHINES)
@given(data=st.data())
def test_table_agrees_with_declared_machine(cls: type[StateMachine], table: Table, data: st.DataObject) -> None:
    events = st.sampled_from([*sorted(table.events), "no_such_event"])
    flags = st.fixed_dictionaries({name: st.booleans() for name in sorted(table.flags)})
    steps = data.draw(st.lists(st.tuples(events, flags), max_size=25), label="steps")
    model = Flags(table.flags)
    machine = cls(model=model)
    state = table.initial
    assert machine.current_state_value == state
    for event, values in steps:
        for name, value in values.items():
            setattr(model, name, value)
        try:
            machine.send(event)
            declared_refused = False
        except TransitionNotAllowed:
            declared_refused = True
        try:
            state = table.fire(state, event, **values)
            table_refused = False
        except IllegalTransition:
            table_refused = True
        assert table_refused == declared_refused, (event, values)
        assert state == machine.current_state_value


def test_guards_are_tried_in_declaration_order() -> None:
    assert GUARDED.fire("start", "go", a=True, b=True) == "left"
    assert GUARDED.fire("start", "go") == "right"
    with pytest.raises(IllegalTransition):
        GUARDED.fire("start", "go", a=True)
    assert GUARDED.fire("left", "go", b=True) == "right"
    with pytest.raises(IllegalTransition):
        GUARDED.fire("left", "go", b=True, c=True)


# -- every path of each machine ------------------------------------------------------------------------------

Step = tuple[str, str, dict[str, bool], str]
"""A path case: from a state, an event with flags, to a target."""

PENDING = ("pending", "pending_refused_once", "pending_refused_twice")
CALL_ENDS = ("idle", "no_reply", "turn_limit", "ended", "send_failed", "cancelled")

SUGGESTION_PATHS: list[Step] = [
    ("proposed", "reject", {}, "invalid"),
    ("proposed", "overtake", {}, "superseded"),
    ("proposed", "review", {"handoff": True, "read_only": True}, "cleared"),
    ("proposed", "review", {"read_only": True}, "cleared"),
    ("proposed", "review", {}, "pending"),
    ("proposed", "review", {"rule_denied": True}, "dismissed"),
    ("proposed", "review", {"rule_denied": True, "policy": True}, "dismissed"),  # a denial needs no approver
    ("proposed", "review", {"rule_approved": True}, "cleared"),
    ("proposed", "review", {"rule_approved": True, "policy": True}, "pending"),  # the policy's people decide
    ("proposed", "review", {"policy": True}, "pending"),
    ("pending", "lapse", {}, "invalid"),
    ("pending_refused_once", "lapse", {}, "invalid"),
    ("pending_refused_twice", "lapse", {}, "invalid"),
    *(
        (pending, event, flags, target)
        for pending in PENDING
        for event, flags, target in (
            ("supersede", {}, "superseded"),
            ("dismiss", {}, "dismissed"),
            ("expire", {}, "dismissed"),
            ("start", {"accepted": True}, "running"),
            ("remind", {"reminder_due": True}, pending),
            ("escalate", {"escalation_due": True}, pending),
        )
    ),
    ("cleared", "start", {"handoff": True}, "handing_off"),
    ("cleared", "start", {}, "running"),
    ("pending", "refuse", {}, "pending_refused_once"),
    ("pending_refused_once", "refuse", {}, "pending_refused_twice"),
    ("pending_refused_twice", "refuse", {}, "invalid"),
    ("running", "succeed", {}, "done"),
    ("running", "fail", {}, "failed"),
    ("handing_off", "succeed", {}, "handed_off"),
    ("handing_off", "fail", {}, "failed"),
    ("running", "interrupt", {}, "failed"),
    ("handing_off", "interrupt", {}, "failed"),
    *((state, "interrupt", {}, "superseded") for state in ("proposed", "cleared", *PENDING)),
]

TURN_LOOP_PATHS: list[Step] = [
    *((end, "begin", {"ending": True, "nothing_to_send": True}, "ended") for end in CALL_ENDS),
    *((end, "begin", {"nothing_to_send": True}, "idle") for end in CALL_ENDS),
    *((end, "begin", {}, "composing") for end in CALL_ENDS),
    ("composing", "start_turn", {}, "awaiting_reply"),
    ("composing", "start_turn", {"out_of_turns": True}, "turn_limit"),
    ("composing", "cancel", {}, "cancelled"),
    ("awaiting_reply", "reply", {}, "handling"),
    ("awaiting_reply", "time_out", {}, "no_reply"),
    ("awaiting_reply", "send_fail", {}, "send_failed"),
    ("awaiting_reply", "cancel", {}, "cancelled"),
    ("handling", "cancel", {}, "cancelled"),
    ("awaiting", "cancel", {}, "cancelled"),
    ("awaiting", "resume", {}, "handling"),
    ("handling", "handled", {"person_pending": True, "ending": True}, "awaiting"),
    ("handling", "handled", {"cut_short": True, "needs_reply": True}, "awaiting"),
    ("handling", "handled", {"ending": True}, "ended"),
    ("handling", "handled", {"ending": True, "words_pending": True, "needs_reply": True}, "ended"),
    ("handling", "handled", {"call_spent": True, "unusable_reply": True, "needs_reply": True}, "no_reply"),
    ("handling", "handled", {"call_spent": True, "person_pending": True}, "awaiting"),
    ("handling", "handled", {"words_pending": True}, "composing"),
    ("handling", "handled", {"needs_reply": True}, "composing"),
    ("handling", "handled", {"unusable_reply": True}, "composing"),
    ("handling", "handled", {"ending": False, "words_pending": False, "needs_reply": False}, "idle"),
    ("handling", "handled", {}, "idle"),
]

LIFE_PATHS: list[Step] = [
    ("open", "begin", {}, "in_turn"),
    ("open", "end", {}, "ended"),
    ("in_turn", "finish", {}, "open"),
    ("in_turn", "end", {}, "ending"),
    ("ending", "end", {}, "ending"),
    ("ending", "finish", {}, "ended"),
    ("ended", "begin", {}, "ending"),
    ("ended", "end", {}, "ended"),
]

CALL_PATHS: list[Step] = [("free", "acquire", {}, "held"), ("held", "release", {}, "free")]

EVERY_DECIDER_RULE = {"past_deadline": True, "unnamed": True, "outside_roles": True}
DECISION_PATHS: list[Step] = [
    # The deadline comes before every other rule; words over a suggestion are no decision on it.
    *(("arrived", kind, EVERY_DECIDER_RULE, "expired") for kind in ("accept", "edit", "dismiss", "say")),
    ("arrived", "supersede", EVERY_DECIDER_RULE, "unknown_decider"),
    # Who may end it holds for every way of ending it, a named decider first.
    *(
        ("arrived", kind, flags, target)
        for kind in ("accept", "edit", "dismiss", "say", "supersede")
        for flags, target in (
            ({"unnamed": True, "outside_roles": True}, "unknown_decider"),
            ({"outside_roles": True, "approved_already": True, "approvals_short": True}, "not_a_decider"),
            ({}, "taken"),
        )
    ),
    # One person approves once; an edit approves afresh, so it never repeats an approval.
    ("arrived", "accept", {"approved_already": True, "approvals_short": True}, "already_approved"),
    ("arrived", "edit", {"approved_already": True}, "taken"),
    *(("arrived", kind, {"approvals_short": True}, "counted") for kind in ("accept", "edit")),
    ("arrived", "dismiss", {"vote": True}, "counted"),
    ("arrived", "dismiss", {"approvals_short": True}, "taken"),
    ("arrived", "say", {"vote": True, "approvals_short": True, "approved_already": True}, "taken"),
]

EVERY_CLAIM_RULE = {
    "unnamed": True,
    "outside_roles": True,
    "approved_already": True,
    "held_by_other": True,
    "not_holder": True,
    "assignee_outside": True,
}
CLAIM_PATHS: list[Step] = [
    # A named decider first, for a claim and an assignment; a release needs only its holder.
    ("arrived", "claim", EVERY_CLAIM_RULE, "unknown_claimant"),
    ("arrived", "assign", EVERY_CLAIM_RULE, "unknown_claimant"),
    ("arrived", "release", EVERY_CLAIM_RULE, "not_claimed"),
    *(("arrived", kind, {**EVERY_CLAIM_RULE, "unnamed": False}, "not_a_decider") for kind in ("claim", "assign")),
    # One who approved it already may not claim it, but may assign it on; someone else's claim blocks a claim.
    ("arrived", "claim", {"approved_already": True, "held_by_other": True}, "already_approved"),
    ("arrived", "assign", {"approved_already": True, "held_by_other": True, "not_holder": True}, "taken"),
    ("arrived", "claim", {"held_by_other": True, "not_holder": True}, "claimed"),
    ("arrived", "claim", {"not_holder": True, "assignee_outside": True}, "taken"),
    ("arrived", "assign", {"assignee_outside": True}, "assignee_not_a_decider"),
    ("arrived", "release", {"unnamed": False, "outside_roles": True, "approved_already": True}, "taken"),
]

PATHS = {
    SUGGESTION.name: SUGGESTION_PATHS,
    TURN_LOOP.name: TURN_LOOP_PATHS,
    LIFE.name: LIFE_PATHS,
    CALL.name: CALL_PATHS,
    DECISION.name: DECISION_PATHS,
    CLAIM.name: CLAIM_PATHS,
}


@pytest.mark.parametrize(
    ("table", "state", "event", "flags", "target"),
    [
        pytest.param(
            table,
            state,
            event,
            flags,
            target,
            id="-".join([f"{table.name}:{state}", event, *(f"{k}={int(v)}" for k, v in flags.items())]),
        )
        for table in (SUGGESTION, TURN_LOOP, LIFE, CALL, DECISION, CLAIM)
        for state, event, flags, target in PATHS[table.name]
    ],
)
def test_path(table: Table, state: str, event: str, flags: dict[str, bool], target: str) -> None:
    assert table.fire(state, event, **flags) == target


@pytest.mark.parametrize("table", TABLES)
def test_paths_cover_every_transition(table: Table) -> None:
    tested = {(state, event, target) for state, event, _, target in PATHS[table.name]}
    assert tested == {(t.source, t.event, t.target) for t in table.transitions}


ALLOWED = {
    SUGGESTION.name: {
        "proposed": {"reject", "overtake", "review", "interrupt"},
        **{
            pending: {
                "supersede",
                "dismiss",
                "expire",
                "lapse",
                "start",
                "refuse",
                "remind",
                "escalate",
                "interrupt",
            }
            for pending in PENDING
        },
        "cleared": {"start", "interrupt"},
        "running": {"succeed", "fail", "interrupt"},
        "handing_off": {"succeed", "fail", "interrupt"},
        **{final: set() for final in ("done", "failed", "invalid", "dismissed", "superseded", "handed_off")},
    },
    TURN_LOOP.name: {
        "composing": {"start_turn", "cancel"},
        "awaiting_reply": {"reply", "time_out", "send_fail", "cancel"},
        "handling": {"handled", "cancel"},
        "awaiting": {"resume", "cancel"},
        **{end: {"begin"} for end in CALL_ENDS},
    },
    LIFE.name: {
        "open": {"begin", "end"},
        "in_turn": {"finish", "end"},
        "ending": {"finish", "end"},
        "ended": {"begin", "end"},
    },
    CALL.name: {"free": {"acquire"}, "held": {"release"}},
    DECISION.name: {
        "arrived": {"accept", "edit", "dismiss", "say", "supersede"},
        **{verdict: set() for verdict in typing.get_args(DecisionVerdict)},
    },
    CLAIM.name: {
        "arrived": {"claim", "release", "assign"},
        **{verdict: set() for verdict in typing.get_args(ClaimVerdict)},
    },
}


@pytest.mark.parametrize("table", TABLES)
def test_allowed_events(table: Table) -> None:
    assert {state: set(table.allowed(state)) for state in table.states} == ALLOWED[table.name]


@pytest.mark.parametrize(
    ("table", "state", "event"),
    [
        pytest.param(table, state, event, id=f"{table.name}:{state}-{event}")
        for table in (SUGGESTION, TURN_LOOP, LIFE, CALL, DECISION, CLAIM)
        for state in table.states
        for event in sorted(table.events - ALLOWED[table.name][state])
    ],
)
def test_refusal(table: Table, state: str, event: str) -> None:
    with pytest.raises(IllegalTransition) as refused:
        table.fire(state, event)
    assert (refused.value.machine, refused.value.state, refused.value.event) == (table.name, state, event)


IMPORTANT_REFUSALS = [
    (SUGGESTION, "proposed", "start", "nothing runs before its review"),
    (SUGGESTION, "proposed", "dismiss", "the person decides only on a presented suggestion"),
    (SUGGESTION, "proposed", "refuse", "a proposal that fails validate is rejected, not refused"),
    (SUGGESTION, "running", "supersede", "a running action is not superseded: it ends done or failed"),
    (SUGGESTION, "running", "dismiss", "a decision cannot undo a run"),
    (SUGGESTION, "handing_off", "supersede", "a hand-off runs to its end"),
    (SUGGESTION, "pending", "succeed", "nothing runs before it is accepted"),
    (SUGGESTION, "done", "fail", "an outcome is final"),
    (SUGGESTION, "invalid", "review", "an invalid suggestion is never shown"),
    (SUGGESTION, "pending", "review", "a suggestion is reviewed once"),
    (TURN_LOOP, "composing", "reply", "no reply before a send"),
    (TURN_LOOP, "awaiting_reply", "handled", "nothing is handled before the reply"),
    (TURN_LOOP, "handling", "start_turn", "the next turn starts after the reply is handled"),
    (TURN_LOOP, "idle", "cancel", "a finished call cannot be cancelled"),
    (TURN_LOOP, "awaiting", "begin", "new words first supersede what waits for the person"),
    (TURN_LOOP, "handling", "begin", "a call begins only once the last one ended"),
    (LIFE, "in_turn", "begin", "a second call while one drives the conversation (ConversationBusy)"),
    (LIFE, "ending", "begin", "a second call while an ending one drives the conversation"),
    (LIFE, "open", "finish", "no turn to finish"),
    (CALL, "held", "acquire", "one call at a time (ConversationBusy)"),
]


@pytest.mark.parametrize(
    ("table", "state", "event"),
    [pytest.param(table, state, event, id=why) for table, state, event, why in IMPORTANT_REFUSALS],
)
def test_important_refusal(table: Table, state: str, event: str) -> None:
    with pytest.raises(IllegalTransition, match=f"event '{event}' is not allowed in state '{state}'"):
        table.fire(state, event)


def test_flags_do_not_affect_unguarded_transitions() -> None:
    assert TURN_LOOP.fire("awaiting_reply", "reply", ending=True, out_of_turns=True) == "handling"


def test_unknown_flag_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unknown flags \\['endng'\\]"):
        TURN_LOOP.fire("handling", "handled", endng=True)


def test_a_remembered_transition_gives_what_the_guards_give_and_a_refusal_is_never_remembered() -> None:
    for _ in range(2):  # the second round reads what the first remembered
        assert TURN_LOOP.fire("handling", "handled", ending=True) == "ended"
        assert TURN_LOOP.fire("handling", "handled", ending=False) != "ended"
        with pytest.raises(IllegalTransition):
            TURN_LOOP.fire("awaiting_reply", "handled", ending=True)
        with pytest.raises(TypeError):
            TURN_LOOP.fire("handling", "handled", endng=True)


@pytest.mark.parametrize("table", [LIFE, TURN_LOOP, SUGGESTION, CALL], ids=lambda table: table.name)
def test_a_guard_fires_as_the_table_does_with_the_same_flags_as_keywords(table: Table) -> None:
    for event in sorted(table.events):
        guarded = [t for t in table.transitions if t.event == event]
        names = tuple(sorted({flag for t in guarded for flag in (*t.cond, *t.unless)}))
        guard = table.guard(event, *names)
        for state, values in itertools.product(table.states, itertools.product((False, True), repeat=len(names))):
            for _ in range(2):  # the second round reads what the first remembered
                key = (state, *values) if names else state
                try:
                    expected = table.fire(state, event, **dict(zip(names, values, strict=True)))
                except IllegalTransition:
                    with pytest.raises(IllegalTransition):
                        guard.fire(state, *values)
                    with pytest.raises(IllegalTransition):
                        guard[key]
                    assert key not in guard  # a refusal is never remembered
                else:
                    assert guard.fire(state, *values) == expected
                    assert guard[key] == expected


def test_a_guard_is_looked_up_by_a_state_and_each_of_its_flags() -> None:
    guard = TURN_LOOP.guard("handled", "ending")
    for key in ["handling", ("handling",), ("handling", True, False)]:
        with pytest.raises(TypeError, match=r"'handled' takes a state and a value for each of \('ending',\)"):
            guard[key]
    with pytest.raises(IllegalTransition):
        TURN_LOOP.guard("reply")[None]
    assert TURN_LOOP.guard("reply")["awaiting_reply"] == TURN_LOOP.fire("awaiting_reply", "reply")


def test_a_guard_refuses_an_unknown_flag_or_event_when_made() -> None:
    with pytest.raises(TypeError, match="unknown flags \\['endng'\\]"):
        TURN_LOOP.guard("handled", "ending", "endng")
    with pytest.raises(ValueError, match="unknown event 'handle'"):
        TURN_LOOP.guard("handle", "ending")


@pytest.mark.parametrize("method", ["allowed", "is_final"])
def test_unknown_state_is_a_value_error(method: str) -> None:
    with pytest.raises(ValueError, match="unknown state 'nowhere'"):
        getattr(SUGGESTION, method)("nowhere")


# -- shape of the machines -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "initial", "finals"),
    [
        (SUGGESTION, "proposed", {"done", "failed", "invalid", "dismissed", "superseded", "handed_off"}),
        (TURN_LOOP, "idle", {"idle", "no_reply", "turn_limit", "ended", "send_failed", "cancelled"}),
        (LIFE, "open", {"ended"}),
        (CALL, "free", set()),
        (DECISION, "arrived", set(typing.get_args(DecisionVerdict))),
        (CLAIM, "arrived", set(typing.get_args(ClaimVerdict))),
    ],
)
def test_initial_and_finals(table: Table, initial: str, finals: set[str]) -> None:
    assert table.initial == initial
    assert table.finals == finals
    assert {state for state in table.states if table.is_final(state)} == finals


def test_ended_is_terminal_though_not_declared_final() -> None:
    assert not ConversationLife.ended.final
    assert LIFE.is_final("ended")
    assert LIFE.fire("ended", "begin") == "ending"


def _successors(table: Table, state: str) -> set[str]:
    return {t.target for t in table.transitions if t.source == state}


@pytest.mark.parametrize("table", TABLES)
def test_every_state_is_reachable_and_can_reach_a_final_state(table: Table) -> None:
    def reachable(start: str) -> set[str]:
        seen, queue = {start}, deque([start])
        while queue:
            for target in _successors(table, queue.popleft()) - seen:
                seen.add(target)
                queue.append(target)
        return seen

    assert reachable(table.initial) == set(table.states)
    for state in table.states:
        if not table.is_final(state) and table.finals:
            assert reachable(state) & table.finals, f"{state} cannot reach a final state"


@pytest.mark.parametrize("table", TABLES)
def test_every_guarded_transition_can_be_taken(table: Table) -> None:
    names = sorted(table.flags)
    assignments = [
        dict(zip(names, values, strict=True)) for values in itertools.product([False, True], repeat=len(names))
    ]

    def taken(source: str, event: str, flags: dict[str, bool]) -> str | None:
        try:
            return table.fire(source, event, **flags)
        except IllegalTransition:  # no guard holds (a transition without an unguarded fallback)
            return None

    for t in table.transitions:
        assert any(taken(t.source, t.event, flags) == t.target for flags in assignments), t


def test_outcome_statuses() -> None:
    assert set(OUTCOME_STATUS) == SUGGESTION.finals
    assert OUTCOME_STATUS["handed_off"] == "handed-off"
    assert all(status == state for state, status in OUTCOME_STATUS.items() if state != "handed_off")
    assert {"done", "failed", "invalid"} == NEEDS_REPLY
    assert set(OUTCOME_STATUS.values()) >= NEEDS_REPLY


def test_table_lists_transitions_in_declaration_order() -> None:
    handled = [t for t in TURN_LOOP.transitions if t.event == "handled"]
    assert handled == [
        Transition(source="handling", event="handled", target="awaiting", cond=("person_pending",)),
        Transition(source="handling", event="handled", target="awaiting", cond=("cut_short",)),
        Transition(source="handling", event="handled", target="ended", cond=("ending",)),
        Transition(source="handling", event="handled", target="no_reply", cond=("call_spent",)),
        Transition(source="handling", event="handled", target="composing", cond=("words_pending",)),
        Transition(source="handling", event="handled", target="composing", cond=("needs_reply",)),
        Transition(source="handling", event="handled", target="composing", cond=("unusable_reply",)),
        Transition(source="handling", event="handled", target="idle"),
    ]
    assert TURN_LOOP.states[:4] == ("idle", "composing", "awaiting_reply", "handling")


@pytest.mark.parametrize(
    ("literal", "table"),
    [(SuggestionState, SUGGESTION), (LoopState, TURN_LOOP), (LifeState, LIFE)],
)
def test_state_types_name_exactly_the_tables_states(literal: object, table: Table) -> None:
    assert typing.get_args(literal) == table.states


def test_the_refusing_verdicts_are_the_decision_tables_refusals() -> None:
    assert set(DECISION_REFUSALS) == DECISION.finals - {"expired", "counted", "taken"}
    assert all(code == verdict.replace("_", "-") for verdict, code in DECISION_REFUSALS.items())


def test_the_refusing_verdicts_are_the_claim_tables_refusals() -> None:
    assert set(CLAIM_REFUSALS) == CLAIM.finals - {"taken"}
    assert all(code == verdict.replace("_", "-") for verdict, code in CLAIM_REFUSALS.items())


def test_status_types_name_exactly_the_statuses_the_tables_report() -> None:
    assert set(typing.get_args(OutcomeStatus)) == set(OUTCOME_STATUS.values())
    assert set(FINAL_STATE) == set(OUTCOME_STATUS.values()) and set(FINAL_STATE.values()) == SUGGESTION.finals
    assert set(typing.get_args(CallStatus)) == set(CALL_STATUS.values())
    assert set(CALL_STATUS) == TURN_LOOP.finals | {"awaiting"}


def test_the_derived_sets_follow_the_tables() -> None:
    assert {"pending", "pending_refused_once", "pending_refused_twice"} == DECIDING
    assert {"running", "handing_off"} == RUNNING
    assert {"ending", "ended"} == ENDED
    assert {"in_turn", "ending"} == IN_CALL
    assert {"said", "resumed", "ended", "claimed", "released", "assigned"} == BETWEEN_CALLS
    assert {"claimed", "released", "assigned"} == CARD_HOLDING


def test_reachable_sources_and_targets() -> None:
    following = {
        "pending",
        "superseded",
        "dismissed",
        "running",
        "pending_refused_once",
        "invalid",
    }  # pending: a reminder
    assert SUGGESTION.reachable("pending") == following
    assert SUGGESTION.sources("succeed") == {"running", "handing_off"}
    assert LIFE.targets("end") == {"ending", "ended"}
    with pytest.raises(ValueError, match="unknown event 'nothing'"):
        SUGGESTION.sources("nothing")


# -- compile_machine accepts only what a table can reproduce -------------------------------------------------


class ExpressionGuard(StateMachine):
    a = State(initial=True)
    b = State(final=True)
    go = a.to(b, cond="x and y")


def _callable_guard(*args: object, **kwargs: object) -> bool:
    return True


class CallableGuard(StateMachine):
    a = State(initial=True)
    b = State(final=True)
    go = a.to(b, cond=_callable_guard)


class Validated(StateMachine):
    a = State(initial=True)
    b = State(final=True)
    go = a.to(b, validators="check")

    def check(self) -> None:
        """Accept everything."""


class Compound(StateMachine):
    class outer(State.Compound):
        inner = State(initial=True)
        done = State(final=True)
        step = inner.to(done)

    end = State(final=True)
    leave = outer.to(end)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (ExpressionGuard, "not a bare flag name"),
        (CallableGuard, "not a bare flag name"),
        (Validated, "without validators"),
        (Compound, "is compound"),
    ],
)
def test_compile_refuses_what_a_table_cannot_reproduce(cls: type[StateMachine], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        compile_machine(cls)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"initial": "nowhere"}, "unknown states \\['nowhere'\\]"),
        ({"finals": frozenset({"nowhere"})}, "unknown states"),
        ({"events": frozenset()}, "undeclared events \\['go'\\]"),
    ],
)
def test_table_checks_its_own_consistency(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "name": "Tiny",
        "initial": "a",
        "states": ("a", "b"),
        "finals": frozenset({"b"}),
        "events": frozenset({"go"}),
        "transitions": (Transition(source="a", event="go", target="b"),),
    }
    with pytest.raises(ValueError, match=message):
        Table(**{**fields, **change})  # type: ignore[arg-type]
