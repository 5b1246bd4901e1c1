"""Who holds a card that waits for a decision: the rules of claiming it, releasing it and assigning it, in the
order they are checked."""

# Rules of holding a card
#
# - A claim, a release or an assignment is made on a suggestion that waits for a deferred decision, between
#   calls; none of them decides anything: anyone who may decide the card still may (a claim says who is on it,
#   so that others leave it alone; it does not lock them out).
# - A claim is made by a named person (`unnamed` refuses: `unknown-claimant`) who may decide the card: holding one
#   of the roles that approve it, when its approval policy names roles (`outside_roles` refuses: `not-a-decider`),
#   and not having approved it already, since their approval is counted (`approved_already` refuses:
#   `already-approved`). It holds until its time runs out; while someone else's claim holds, the card cannot be
#   claimed (`held_by_other` refuses: `claimed`). A claim by its holder renews it.
# - A release is made by the holder of a claim that still holds (`not_holder` refuses: `not-claimed`); the card
#   is free again.
# - An assignment routes the card to a person or a role, or to nobody (it is taken back). It is made by a named
#   person who may decide the card (`unnamed`, `outside_roles`, as for a claim); one who approved it already may
#   assign it on, to the next approver. The person assigned must be one who may decide it, the role one of the
#   roles that approve it (`assignee_outside` refuses: `assignee-not-a-decider`). An assignment to a
#   person ends any claim someone else holds on the card.
# - A refusal changes nothing, and is not logged: the caller is told why.

from __future__ import annotations

from typing import Literal

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["CLAIM", "CLAIM_REFUSALS", "ClaimRules", "ClaimVerdict"]


class ClaimRules(StateMachine):
    """The verdict on one claim, release or assignment of a waiting card (each event is one of them); the
    runtime runs the compiled :data:`CLAIM` table."""

    arrived = State(initial=True)
    unknown_claimant = State(final=True)
    not_a_decider = State(final=True)
    already_approved = State(final=True)
    claimed = State(final=True)
    not_claimed = State(final=True)
    assignee_not_a_decider = State(final=True)
    taken = State(final=True)

    claim = (
        arrived.to(unknown_claimant, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(already_approved, cond="approved_already")
        | arrived.to(claimed, cond="held_by_other")
        | arrived.to(taken)
    )
    release = arrived.to(not_claimed, cond="not_holder") | arrived.to(taken)
    assign = (
        arrived.to(unknown_claimant, cond="unnamed")
        | arrived.to(not_a_decider, cond="outside_roles")
        | arrived.to(assignee_not_a_decider, cond="assignee_outside")
        | arrived.to(taken)
    )


CLAIM = compile_machine(ClaimRules)

ClaimVerdict = Literal[
    "unknown_claimant",
    "not_a_decider",
    "already_approved",
    "claimed",
    "not_claimed",
    "assignee_not_a_decider",
    "taken",
]
"""What a claim, release or assignment comes to (a test holds it equal to the table's final states)."""

CLAIM_REFUSALS: dict[str, str] = {
    "unknown_claimant": "unknown-claimant",
    "not_a_decider": "not-a-decider",
    "already_approved": "already-approved",
    "claimed": "claimed",
    "not_claimed": "not-claimed",
    "assignee_not_a_decider": "assignee-not-a-decider",
}
"""The verdicts that refuse, each with the code the refusal (:class:`~dial_runtime.ClaimRefused`) carries."""
