"""The turns one call runs: send, await the reply, handle it, and decide whether another turn follows."""

# Rules of the turn loop
#
# - Between calls the loop rests in the state its last call ended in (`idle` before the first call). A call
#   `begin`s from there: with nothing to send (no words and nothing owed) it ends `idle` at once; on a
#   conversation that has ended it ends `ended` at once (its words are logged, nothing is sent); otherwise it
#   starts `composing` the first turn's message.
# - A turn starts when its message is composed. Starting it when the turn limit is used up ends the loop
#   `turn_limit`; otherwise the message is sent and the loop is `awaiting_reply`.
# - A reply is handled; no reply before the deadline ends the loop `no_reply`, and a send that fails with any
#   other error ends it `send_failed` (the call raises that error).
# - Once the reply is handled as far as it can be, the loop is `awaiting` the person when a decision or an answer
#   was deferred, or when the call was cut short while handling (a crash): it is parked between calls, and
#   resumes `handling` when a decision or an answer arrives, or on resume (in any process). Otherwise the loop
#   ends `ended` when the conversation ends (the agent signalled session-complete, or end() was called), and
#   `no_reply` when the call is spent: its own deadline cut the reply (the call has had its time), or the agent
#   repeated, byte for byte, a reply that could not be used (telling it the same again would bring the same);
#   what is owed goes with the next call. Another turn follows at once when words are owed (an answer, or what
#   the person wrote instead of deciding), when an outcome needs a reply (done, failed, invalid), or when the
#   reply could not be used (the agent is told why); otherwise the loop ends `idle`.
# - Cancelling the call (or a callback raising) ends the loop `cancelled` from any state that is not final, a
#   parked loop included (new words supersede what waits).
# - The flags are the caller's facts; the declared machine reads them from its model.

from __future__ import annotations

from typing import ClassVar, Literal

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["CALL_STATUS", "TURN_LOOP", "CallStatus", "LoopState", "TurnLoop"]


class TurnLoop(StateMachine):
    """The turns of one call; the runtime runs the compiled :data:`TURN_LOOP` table."""

    # A call ends in one of these, and the next call begins from it: python-statemachine cannot declare a state
    # with outgoing transitions final, so the compiled table marks them final.
    terminal_states: ClassVar[frozenset[str]] = frozenset(
        {"idle", "no_reply", "turn_limit", "ended", "send_failed", "cancelled"}
    )

    idle = State(initial=True)
    composing = State()
    awaiting_reply = State()
    handling = State()
    awaiting = State()
    no_reply = State()
    turn_limit = State()
    ended = State()
    send_failed = State()
    cancelled = State()

    begin = (
        ended.from_(idle, no_reply, turn_limit, ended, send_failed, cancelled, cond="ending")
        | idle.from_(idle, no_reply, turn_limit, ended, send_failed, cancelled, cond="nothing_to_send")
        | composing.from_(idle, no_reply, turn_limit, ended, send_failed, cancelled)
    )
    start_turn = composing.to(turn_limit, cond="out_of_turns") | composing.to(awaiting_reply)
    reply = awaiting_reply.to(handling)
    time_out = awaiting_reply.to(no_reply)
    send_fail = awaiting_reply.to(send_failed)
    resume = awaiting.to(handling)
    cancel = cancelled.from_(composing, awaiting_reply, handling, awaiting)
    handled = (
        handling.to(awaiting, cond="person_pending")
        | handling.to(awaiting, cond="cut_short")
        | handling.to(ended, cond="ending")
        | handling.to(no_reply, cond="call_spent")
        | handling.to(composing, cond="words_pending")
        | handling.to(composing, cond="needs_reply")
        | handling.to(composing, cond="unusable_reply")
        | handling.to(idle)
    )


TURN_LOOP = compile_machine(TurnLoop)

LoopState = Literal[
    "idle",
    "composing",
    "awaiting_reply",
    "handling",
    "awaiting",
    "no_reply",
    "turn_limit",
    "ended",
    "send_failed",
    "cancelled",
]
"""A turn loop state (a test holds it equal to the table's states)."""

CallStatus = Literal["idle", "no-reply", "turn-limit", "ended", "awaiting", "interrupted"]
"""How a call finished: a ``TurnResult`` status, or ``interrupted`` for a call that raised."""

CALL_STATUS: dict[str, CallStatus] = {
    "idle": "idle",
    "no_reply": "no-reply",
    "turn_limit": "turn-limit",
    "ended": "ended",
    "awaiting": "awaiting",
    "send_failed": "interrupted",
    "cancelled": "interrupted",
}
"""The status a call reports, by the loop state it stopped in."""
