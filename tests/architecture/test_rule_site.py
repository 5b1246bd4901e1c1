"""Each rule has one site: the machines declare it, the fold applies it, and everything else asks the fold.

The core asks the fold's verdict before it records a decision and records what the verdict says; the fold then
refuses any entry the verdict would not have written, so a decision logged past its deadline, by a decider the
policy does not take, or refused for a reason the rules do not give, builds no conversation. The source test
below fails when a rule's inputs are read outside the fold again: a rule written a second time.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import Accept, ActionSpec, ApprovalPolicy, Defer, Dismiss, Edit, Say
from dial_runtime.errors import LogError
from dial_runtime.runtime.core import ConversationCore
from dial_runtime.runtime.effects import Answer, Consult, LookUp, Ran, Replied, Review, Reviewed, RunAction, Send
from dial_runtime.runtime.events import ApprovalRefusedEvent, DecidedEvent, LogEntry
from dial_runtime.runtime.state import ConversationState, fold_log
from dial_runtime.runtime.upgrade import upgraded
from dial_runtime.statemachines import DECISION_REFUSALS
from tests.architecture.test_layers import PACKAGE

#: The fold's module: the one place a rule's inputs are read.
FOLD = PACKAGE / "runtime" / "state.py"

#: What the rules of deciders and approvals read: only the fold may read them.
RULE_INPUTS = {"dismissal_ends", "done_proposals", "approvers_needed"}
RULE_CALLS = {"met", "approving_roles"}
#: The times a waiting suggestion has: comparing one with a clock is a time rule (expired, reminder or
#: escalation due), which only the fold's ``OpenSuggestion`` writes.
TIMES = {"deadline", "remind_at", "escalate_at"}


def _rule_readings(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in RULE_INPUTS:
            found.append(f"line {node.lineno}: reads .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RULE_CALLS:
            found.append(f"line {node.lineno}: calls .{node.func.attr}()")
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops
        ):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Attribute) and side.attr in TIMES:
                    found.append(f"line {node.lineno}: compares .{side.attr}")
    return found


def test_no_module_but_the_fold_reads_what_the_rules_read() -> None:
    readings = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == FOLD or path.parent.name == "statemachines":
            continue
        found = _rule_readings(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            readings[str(path.relative_to(PACKAGE))] = found
    assert readings == {}, "a rule is written again outside the fold: ask the fold's verdict instead"


def test_the_source_test_sees_a_rule_written_again() -> None:
    again = ast.parse("late = now > opened.deadline\nok = policy.met(approvers, None)\nx = policy.dismissal_ends")
    assert len(_rule_readings(again)) == 3


# -- the core records what the fold's verdict says, and the fold refuses anything else ----------------------


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Decision:
    kind: str
    by: str | None
    roles: tuple[str, ...]
    late: bool


POLICIES = st.one_of(
    st.none(),
    st.builds(
        ApprovalPolicy,
        approvals=st.integers(1, 3),
        roles=st.frozensets(st.sampled_from(["ops", "lead"]), max_size=2),
        separation=st.booleans(),
        dismissal_ends=st.booleans(),
    ),
)
DECISIONS = st.builds(
    Decision,
    kind=st.sampled_from(["accept", "edit", "dismiss", "say"]),
    by=st.sampled_from([None, "ana", "bo", "cy"]),
    roles=st.lists(st.sampled_from(["ops", "lead", "guest"]), max_size=2, unique=True).map(tuple),
    late=st.booleans(),
)
SPEECH: dict[str, Accept | Edit | Dismiss | Say] = {
    "accept": Accept(),
    "edit": Edit({"text": "buy bread"}),
    "dismiss": Dismiss(),
    "say": Say("stop"),
}


def _deferred_core(policy: ApprovalPolicy | None, clock: Clock) -> ConversationCore:
    """A core whose one suggestion (``sg-1``, deadline 60 s) waits deferred for a decision."""
    core = ConversationCore(clock=clock)
    reply = (
        '<dial><dial-suggest action="add-note">Add it</dial-suggest>'
        '<dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare></dial>'
    )
    spec = ActionSpec(mutates=True, deadline=60.0, policy=policy)
    _drive(core.say("add a note", by="ana"), reply, spec)
    assert core.state.open_suggestions["sg-1"].deferred
    return core


def _drive(call: Any, reply: str, spec: ActionSpec) -> None:
    """Answer a call's effects as a driver would: the reply, the spec, a valid review, a person who defers, a
    run that succeeds."""
    value: Any = None
    while True:
        try:
            effect = call.send(value)
        except StopIteration:
            return
        if isinstance(effect, Send):
            value = Replied(reply)
        elif isinstance(effect, LookUp):
            value = spec
        elif isinstance(effect, Review):
            value = Reviewed(None, "Add the note")
        elif isinstance(effect, Consult):
            value = Answer(Defer())
        elif isinstance(effect, RunAction):
            value = Ran(None)
        else:
            value = None


@settings(max_examples=150, deadline=None)
@given(policy=POLICIES, decisions=st.lists(DECISIONS, min_size=1, max_size=4))
def test_every_decision_is_recorded_as_the_folds_verdict_says(
    policy: ApprovalPolicy | None, decisions: list[Decision]
) -> None:
    clock = Clock()
    core = _deferred_core(policy, clock)
    spec = ActionSpec(mutates=True, deadline=60.0, policy=policy)
    for decision in decisions:
        opened = core.state.open_suggestions.get("sg-1")
        if opened is None or not opened.deferred:
            break
        clock.now = opened.deadline + 1 if decision.late and opened.deadline else clock.now + 1
        logged_roles = tuple(sorted(decision.roles)) if policy is not None and policy.roles else ()
        verdict = opened.verdict(decision.kind, decision.by, logged_roles, clock.now)
        before = len(core.log)
        call = core.decide("sg-1", SPEECH[decision.kind], decision.by, roles=decision.roles)
        _drive(call, "<dial><dial-inform>Noted.</dial-inform></dial>", spec)
        written = [
            event for event in core.log.events[before:] if isinstance(event, (DecidedEvent, ApprovalRefusedEvent))
        ]
        first = written[0]
        if verdict == "expired":
            assert isinstance(first, DecidedEvent) and first.decision == "expire"
        elif verdict in DECISION_REFUSALS:
            assert isinstance(first, ApprovalRefusedEvent) and first.code == DECISION_REFUSALS[verdict]
        else:
            assert isinstance(first, DecidedEvent) and first.decision == decision.kind
    fold_log(core.log.entries())  # the log the core wrote stands


def _refusal_log(policy: ApprovalPolicy) -> tuple[list[LogEntry], int]:
    clock = Clock()
    core = _deferred_core(policy, clock)
    clock.now += 1
    before = len(core.log)
    _drive(core.decide("sg-1", Accept(), None), "", ActionSpec(mutates=True, policy=policy))
    entries = core.log.entries()
    index = next(i for i, entry in enumerate(entries) if i >= before and entry.event.type == "approval-refused")
    return entries, index


@pytest.mark.parametrize("code", sorted(set(DECISION_REFUSALS.values()) - {"unknown-decider"}))
def test_a_refusal_the_rules_do_not_give_is_refused(code: str) -> None:
    entries, index = _refusal_log(ApprovalPolicy(approvals=2))
    forged = entries[index].event
    assert isinstance(forged, ApprovalRefusedEvent) and forged.code == "unknown-decider"
    entries[index] = LogEntry(seq=entries[index].seq, time=entries[index].time, event=_replace(forged, code=code))
    with pytest.raises(LogError, match="its rules do not refuse it"):
        fold_log(entries)


def test_a_decision_logged_after_its_deadline_is_refused() -> None:
    clock = Clock()
    core = _deferred_core(None, clock)
    clock.now += 30
    _drive(
        core.decide("sg-1", Accept(), "ana"),
        "<dial><dial-inform>Done.</dial-inform></dial>",
        ActionSpec(mutates=True),
    )
    entries = core.log.entries()
    index = next(i for i, entry in enumerate(entries) if entry.event.type == "decided")
    late = LogEntry(seq=entries[index].seq, time=entries[index].time + 60, event=entries[index].event)
    with pytest.raises(LogError, match="after its deadline"):
        fold_log([*entries[:index], late, *entries[index + 1 :]])


def _replace(event: Any, **changes: Any) -> Any:
    return msgspec.structs.replace(event, **changes)


# -- an outcome records the trigger that ended it, not a status to map back ------------------------------------

SUGGEST = (
    '<dial><dial-suggest action="add-note">Add it</dial-suggest>'
    '<dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare></dial>'
)
DONE = "<dial><dial-inform>Done.</dial-inform></dial>"
UNUSABLE = SUGGEST.replace('{"text":"buy milk"}', "{oops")


def _outcomes_after(decision: Accept | Dismiss | Say | None, reply: str = SUGGEST) -> list[LogEntry]:
    """The log of one suggestion (``reply``) decided on with ``decision`` (``None``: never shown, or
    rejected)."""
    clock = Clock()
    core = ConversationCore(clock=clock)
    _drive(core.say("add a note", by="ana"), reply, ActionSpec(mutates=True))
    if decision is not None:
        _drive(core.decide("sg-1", decision, "ana"), DONE, ActionSpec(mutates=True))
    return core.log.entries()


@pytest.mark.parametrize(
    ("decision", "reply", "status", "trigger"),
    [
        (Accept(), SUGGEST, "done", "succeed"),
        (Dismiss(), SUGGEST, "dismissed", None),  # the decision ended it
        (Say("not now"), SUGGEST, "superseded", None),
        (None, UNUSABLE, "invalid", "reject"),
    ],
)
def test_an_outcome_records_the_trigger_that_ended_it(
    decision: Accept | Dismiss | Say | None, reply: str, status: str, trigger: str | None
) -> None:
    outcomes = [entry.event for entry in _outcomes_after(decision, reply) if entry.event.type == "outcome"]
    assert [(each.status, each.trigger) for each in outcomes[:1]] == [(status, trigger)]


def _without_triggers(entries: list[LogEntry]) -> list[LogEntry]:
    """``entries`` as a log written before outcomes recorded their trigger."""
    return [
        LogEntry(seq=entry.seq, time=entry.time, event=_replace(entry.event, trigger=None))
        if entry.event.type == "outcome"
        else entry
        for entry in entries
    ]


def test_a_log_written_before_outcomes_recorded_their_trigger_folds_to_the_same_state() -> None:
    for decision in (Accept(), Dismiss(), None):
        entries = _outcomes_after(decision, SUGGEST if decision is not None else UNUSABLE)
        old = _without_triggers(entries)
        assert fold_log(old) == old
        now, then = fold_log_state(entries), fold_log_state(old)
        assert (now.ended_suggestions, now.done_proposals) == (then.ended_suggestions, then.done_proposals)


def test_a_trigger_that_does_not_give_the_outcomes_status_is_refused() -> None:
    entries = _outcomes_after(Accept())
    index = next(i for i, entry in enumerate(entries) if entry.event.type == "outcome")
    forged = _replace(entries[index].event, trigger="fail")
    entries[index] = LogEntry(seq=entries[index].seq, time=entries[index].time, event=forged)
    with pytest.raises(LogError, match="cannot end 'done' from 'running'"):
        fold_log(entries)


def fold_log_state(entries: list[LogEntry]) -> ConversationState:
    state = ConversationState()
    fold_log(entries, state)
    return state


def test_the_upgrade_step_gives_an_old_log_the_triggers_a_new_one_records() -> None:
    for decision in (Accept(), Dismiss(), Say("later"), None):
        entries = _outcomes_after(decision, SUGGEST if decision is not None else UNUSABLE)
        assert upgraded(_without_triggers(entries)) == entries
