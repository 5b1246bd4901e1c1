"""The life of one suggestion, from the agent's proposal to the outcome the agent is told."""

# Rules of a suggestion's life
#
# - Every suggestion starts `proposed` and ends in exactly one final state, which the agent is told as an
#   outcome (OUTCOME_STATUS names its status).
# - Once read, a suggestion is reviewed: an unknown action, or a payload that is unusable or that the domain's
#   validate refuses, is rejected (`reject`): it ends `invalid` at once, and the person never sees it; a valid
#   one that arrives after the person said something else in this reply is overtaken (`overtake`): it ends
#   `superseded`; otherwise it is shown (`review`): a read-only or hand-off action is `cleared` to run without
#   asking, any other suggestion waits `pending` for the person, unless the application's rules for whether to
#   ask decided it first: a rule's denial ends it `dismissed` (`rule_denied`), and a rule's approval clears it
#   to run (`rule_approved`), except where an approval policy names who must approve it (`policy`): people do.
# - While pending, the person decides: dismiss ends it `dismissed`, and so does the decision deadline passing
#   (`expire`); an accept (or an edit) lets it start once its payload passes validate again.
# - An edit that fails validate, or an accept of a payload that failed before, is refused and the person
#   decides again; the third refusal ends `invalid`. What a decision comes to (its deadline, who may decide,
#   the approvals a policy needs) is the decision machine's verdict (`decision.py`): only a decision it takes
#   moves the suggestion.
# - While a deferred suggestion waits, its deciders are reminded once its reminder time has come
#   (`reminder_due`), and it escalates once its escalation time has come (`escalation_due`): each happens once,
#   and neither moves it on.
# - A suggestion whose action has a precondition ends `invalid` once the domain says its premise no longer holds
#   while it waits (`lapse`): checked before it runs, and on a schedule while it is deferred.
# - A suggestion that would do again what the last suggestion done with the same action and payload did is
#   marked as done before, unless its action is repeatable; dismissed, its outcome says so (`already-done`).
# - When the person says something else, a suggestion still waiting for them ends `superseded`.
# - An action starts once, and only from a state that runs it (`start`): a pending suggestion the person
#   accepted (the `accepted` guard: an accept or edit since the last refusal), or one cleared to run (a hand-off
#   starts `handing_off`). A running action ends `done`, or `failed` when it raised.
# - When a turn is interrupted (cancelled, a callback raised, the process died), every suggestion without an
#   outcome gets one: a running action ends `failed` (its effect is unknown), any other suggestion `superseded`.
# - Only `done`, `failed` and `invalid` make a turn follow at once (NEEDS_REPLY); the other outcomes go with
#   the person's next words.
# - Only `done` fires the domain flow's event the action is bound to (MOVES_FLOW).

from __future__ import annotations

from typing import Literal

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = [
    "DECIDING",
    "FINAL_STATE",
    "MOVES_FLOW",
    "NEEDS_REPLY",
    "OUTCOME_STATUS",
    "RUNNING",
    "SUCCEEDED",
    "SUGGESTION",
    "OutcomeStatus",
    "OutcomeTrigger",
    "SuggestionLifecycle",
    "SuggestionState",
]


class SuggestionLifecycle(StateMachine):
    """A suggestion from proposal to outcome; the runtime runs the compiled :data:`SUGGESTION` table."""

    proposed = State(initial=True)
    pending = State()
    pending_refused_once = State()
    pending_refused_twice = State()
    cleared = State()
    running = State()
    handing_off = State()
    done = State(final=True)
    failed = State(final=True)
    invalid = State(final=True)
    dismissed = State(final=True)
    superseded = State(final=True)
    handed_off = State(final=True)

    reject = proposed.to(invalid)
    overtake = proposed.to(superseded)
    review = (
        proposed.to(cleared, cond="handoff")
        | proposed.to(cleared, cond="read_only")
        | proposed.to(dismissed, cond="rule_denied")
        | proposed.to(cleared, cond="rule_approved", unless="policy")
        | proposed.to(pending)
    )
    supersede = superseded.from_(pending, pending_refused_once, pending_refused_twice)
    dismiss = dismissed.from_(pending, pending_refused_once, pending_refused_twice)
    expire = dismissed.from_(pending, pending_refused_once, pending_refused_twice)
    lapse = invalid.from_(pending, pending_refused_once, pending_refused_twice)
    start = (
        running.from_(pending, pending_refused_once, pending_refused_twice, cond="accepted")
        | cleared.to(handing_off, cond="handoff")
        | cleared.to(running)
    )
    refuse = (
        pending.to(pending_refused_once)
        | pending_refused_once.to(pending_refused_twice)
        | pending_refused_twice.to(invalid)
    )
    remind = (
        pending.to(pending, cond="reminder_due")
        | pending_refused_once.to(pending_refused_once, cond="reminder_due")
        | pending_refused_twice.to(pending_refused_twice, cond="reminder_due")
    )
    escalate = (
        pending.to(pending, cond="escalation_due")
        | pending_refused_once.to(pending_refused_once, cond="escalation_due")
        | pending_refused_twice.to(pending_refused_twice, cond="escalation_due")
    )
    succeed = running.to(done) | handing_off.to(handed_off)
    fail = running.to(failed) | handing_off.to(failed)
    interrupt = failed.from_(running, handing_off) | superseded.from_(
        proposed, cleared, pending, pending_refused_once, pending_refused_twice
    )


SUGGESTION = compile_machine(SuggestionLifecycle)

SuggestionState = Literal[
    "proposed",
    "pending",
    "pending_refused_once",
    "pending_refused_twice",
    "cleared",
    "running",
    "handing_off",
    "done",
    "failed",
    "invalid",
    "dismissed",
    "superseded",
    "handed_off",
]
"""A suggestion's lifecycle state (a test holds it equal to the table's states)."""

OutcomeStatus = Literal["done", "failed", "invalid", "dismissed", "superseded", "handed-off"]
"""The status of an outcome, as the agent is told it."""

OUTCOME_STATUS: dict[str, OutcomeStatus] = {
    "done": "done",
    "failed": "failed",
    "invalid": "invalid",
    "dismissed": "dismissed",
    "superseded": "superseded",
    "handed_off": "handed-off",
}
"""The outcome status a suggestion reports, by final state."""

FINAL_STATE: dict[str, str] = {status: state for state, status in OUTCOME_STATUS.items()}
"""The final state an outcome status reports."""

DECIDING = SUGGESTION.sources("dismiss")
"""The states in which a suggestion waits for the person: those the person can dismiss it from."""

RUNNING = SUGGESTION.sources("succeed")
"""The states in which a suggestion's action is in flight (an interruption leaves its effect unknown)."""

SUCCEEDED: dict[str, OutcomeStatus] = {
    state: OUTCOME_STATUS[SUGGESTION.fire(state, "succeed")] for state in RUNNING
}
"""The outcome status of an action that ran to its end, by the state it ran in (read from the table once)."""

NEEDS_REPLY = frozenset({"done", "failed", "invalid"})
"""The outcome statuses that make a turn follow at once."""

OutcomeTrigger = Literal["reject", "overtake", "succeed", "fail", "interrupt", "supersede", "lapse"]
"""The events of the machine that end a suggestion with its outcome, as the log's ``outcome`` records them (the
others end it before its outcome: a dismissal, an expiry, the third refusal)."""

MOVES_FLOW = frozenset({"done"})
"""The outcome statuses that fire the flow event their action is bound to (see ``Domain(flow=...)``)."""
