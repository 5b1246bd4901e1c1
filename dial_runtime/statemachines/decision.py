"""What one decision does to a suggestion that waits for the person: the rules of deadlines, deciders and
approvals, in the order they are checked."""

# Rules of a decision
#
# - A decision arrives on a suggestion waiting for the person (DECIDING): an accept, an edit, a dismissal, or
#   words said instead (`say`), which end every other waiting suggestion too (`supersede` for each of them, as
#   for new words said over the conversation).
# - The decision deadline comes first: an accept, an edit, a dismissal or words that arrive after it are not
#   taken, and the suggestion expires (`expired`). Words that supersede a suggestion are no decision on it, and
#   are not checked against its deadline.
# - Who may end a suggestion, by any of these means: anyone who may decide, when it has no approval policy;
#   under a policy only a named person (`unnamed` refuses: `unknown-decider`), holding one of the roles that
#   approve it when the policy names roles (`outside_roles` refuses: `not-a-decider`); once it has escalated,
#   the roles it escalated to approve it too.
# - An accept is an approval, and one person approves once (`approved_already` refuses: `already-approved`); an
#   edit approves its new payload afresh, so it never repeats an approval.
# - An approval that leaves the policy short of the approvals it needs is `counted`, and the suggestion waits
#   for the next approver; the one that meets the policy is `taken`: the suggestion runs once its payload passes
#   the domain's validate again.
# - A dismissal under a policy whose dismissal does not end the suggestion is a vote against (`counted`): it
#   waits on, for approvals or its deadline. Any other dismissal is `taken`: the suggestion ends `dismissed`.
# - A refusal changes nothing but the log, which keeps it (`approval-refused`, with the refusal's code); the
#   suggestion waits for a decider the rules take.

from __future__ import annotations

from typing import Literal

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["DECISION", "DECISION_REFUSALS", "DecisionRules", "DecisionVerdict"]


class DecisionRules(StateMachine):
    """The verdict on one decision (each event is a kind of decision); the runtime runs the compiled
    :data:`DECISION` table."""

    arrived = State(initial=True)
    expired = State(final=True)
    unknown_decider = State(final=True)
    not_a_decider = State(final=True)
    already_approved = State(final=True)
    counted = State(final=True)
    taken = State(final=True)

    accept = (
        arrived.to(expired, cond="past_deadline")
        | arrived.to(unknown_decider, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(already_approved, cond="approved_already")
        | arrived.to(counted, cond="approvals_short")
        | arrived.to(taken)
    )
    edit = (
        arrived.to(expired, cond="past_deadline")
        | arrived.to(unknown_decider, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(counted, cond="approvals_short")
        | arrived.to(taken)
    )
    dismiss = (
        arrived.to(expired, cond="past_deadline")
        | arrived.to(unknown_decider, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(counted, cond="vote")
        | arrived.to(taken)
    )
    say = (
        arrived.to(expired, cond="past_deadline")
        | arrived.to(unknown_decider, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(taken)
    )
    supersede = (
        arrived.to(unknown_decider, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(taken)
    )


DECISION = compile_machine(DecisionRules)

DecisionVerdict = Literal["expired", "unknown_decider", "not_a_decider", "already_approved", "counted", "taken"]
"""What a decision comes to (a test holds it equal to the table's final states)."""

DECISION_REFUSALS: dict[str, str] = {
    "unknown_decider": "unknown-decider",
    "not_a_decider": "not-a-decider",
    "already_approved": "already-approved",
}
"""The verdicts that refuse a decision, each with the code its ``approval-refused`` entry logs."""
