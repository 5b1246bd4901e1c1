"""The turns one ``say`` runs: send, await the reply, handle it, and decide whether another turn follows."""

# Rules of the turn loop
#
# - A turn starts `composing` what is owed to the agent. Starting it when the turn limit is used up ends the
#   loop `turn_limit`; otherwise the message is sent and the loop is `awaiting_reply`.
# - A reply is handled; no reply before the deadline ends the loop `no_reply`, and a send that fails with any
#   other error ends it `send_failed` (say raises that error).
# - After a reply is handled, the loop ends `ended` when the conversation ends (the agent signalled
#   session-complete, or end() was called). Otherwise another turn follows at once when words are owed (an
#   answer, or what the person wrote instead of deciding), when an outcome needs a reply (done, failed,
#   invalid), or when the reply could not be used (the agent is told why). Otherwise the loop ends `idle`.
# - A reply whose suggestions or asks the person deferred is `awaiting` their decisions: the loop is parked
#   between calls and resumes `handling` when a decision or an answer arrives (in any process).
# - Cancelling say ends the loop `cancelled` from any state that is not final.
# - The flags `out_of_turns`, `ending`, `words_pending`, `needs_reply` and `unusable_reply` are the caller's
#   facts; the declared machine reads them from its model.

from __future__ import annotations

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["TURN_LOOP", "TurnLoop"]


class TurnLoop(StateMachine):
    """The turns of one ``say``; the runtime runs the compiled :data:`TURN_LOOP` table."""

    composing = State(initial=True)
    awaiting_reply = State()
    handling = State()
    awaiting = State()
    idle = State(final=True)
    no_reply = State(final=True)
    turn_limit = State(final=True)
    ended = State(final=True)
    send_failed = State(final=True)
    cancelled = State(final=True)

    start_turn = composing.to(turn_limit, cond="out_of_turns") | composing.to(awaiting_reply)
    reply = awaiting_reply.to(handling)
    time_out = awaiting_reply.to(no_reply)
    send_fail = awaiting_reply.to(send_failed)
    park = handling.to(awaiting)
    resume = awaiting.to(handling)
    cancel = cancelled.from_(composing, awaiting_reply, handling)
    handled = (
        handling.to(ended, cond="ending")
        | handling.to(composing, cond="words_pending")
        | handling.to(composing, cond="needs_reply")
        | handling.to(composing, cond="unusable_reply")
        | handling.to(idle)
    )


TURN_LOOP = compile_machine(TurnLoop)
