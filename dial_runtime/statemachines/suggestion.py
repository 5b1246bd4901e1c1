"""The life of one suggestion, from the agent's proposal to the outcome the agent is told."""

# Rules of a suggestion's life
#
# - Every suggestion starts `proposed` and ends in exactly one final state, which the agent is told as an
#   outcome (OUTCOME_STATUS names its status).
# - An unknown action, or a payload the domain's validate refuses, ends `invalid` at once: the person never
#   sees it.
# - A read-only action runs without asking. A hand-off action runs without asking and ends `handed_off`, or
#   `failed` if it raised.
# - Any other suggestion is presented and the person decides: accept (or an edit whose payload passes validate)
#   runs it; dismiss ends it `dismissed`, and so does the decision deadline passing.
# - An edit that fails validate, or an accept of a payload that failed before, is refused and the person
#   decides again; the third refusal ends `invalid`.
# - When the person says something else during the reply, or the turn is cancelled, a suggestion not yet
#   running ends `superseded`.
# - A running action ends `done`, or `failed` when it raised.
# - When a turn is interrupted (cancelled, a callback raised, the process died), every suggestion without an
#   outcome gets one: a running action ends `failed` (its effect is unknown), any other suggestion `superseded`.
# - Only `done`, `failed` and `invalid` make a turn follow at once (NEEDS_REPLY); the other outcomes go with
#   the person's next words.

from __future__ import annotations

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["NEEDS_REPLY", "OUTCOME_STATUS", "SUGGESTION", "SuggestionLifecycle"]


class SuggestionLifecycle(StateMachine):
    """A suggestion from proposal to outcome; the runtime runs the compiled :data:`SUGGESTION` table."""

    proposed = State(initial=True)
    pending = State()
    pending_refused_once = State()
    pending_refused_twice = State()
    running = State()
    handing_off = State()
    done = State(final=True)
    failed = State(final=True)
    invalid = State(final=True)
    dismissed = State(final=True)
    superseded = State(final=True)
    handed_off = State(final=True)

    reject = proposed.to(invalid)
    supersede = superseded.from_(proposed, pending, pending_refused_once, pending_refused_twice)
    run_read_only = proposed.to(running)
    hand_off = proposed.to(handing_off)
    present = proposed.to(pending)
    dismiss = dismissed.from_(pending, pending_refused_once, pending_refused_twice)
    expire = dismissed.from_(pending, pending_refused_once, pending_refused_twice)
    accept = running.from_(pending, pending_refused_once, pending_refused_twice)
    refuse = (
        pending.to(pending_refused_once)
        | pending_refused_once.to(pending_refused_twice)
        | pending_refused_twice.to(invalid)
    )
    succeed = running.to(done) | handing_off.to(handed_off)
    fail = running.to(failed) | handing_off.to(failed)
    interrupt = failed.from_(running, handing_off) | superseded.from_(
        proposed, pending, pending_refused_once, pending_refused_twice
    )


SUGGESTION = compile_machine(SuggestionLifecycle)

OUTCOME_STATUS: dict[str, str] = {
    "done": "done",
    "failed": "failed",
    "invalid": "invalid",
    "dismissed": "dismissed",
    "superseded": "superseded",
    "handed_off": "handed-off",
}
"""The outcome status a suggestion reports, by final state."""

NEEDS_REPLY = frozenset({"done", "failed", "invalid"})
"""The outcome statuses that make a turn follow at once."""
