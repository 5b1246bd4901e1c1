"""One conversation object, driven by one call at a time."""

# Rules of a call
#
# - A conversation object is `free` between calls. A call (say, decide, answer, resume, open) `acquire`s it and
#   holds it until it `release`s it, whatever the call's end.
# - A call that comes while another holds the object is refused: the runtime turns that refusal into
#   ConversationBusy at once, before any await, so the first call is not disturbed. Across processes the store's
#   lock plays the same part.

from __future__ import annotations

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["CALL", "CallGate"]


class CallGate(StateMachine):
    """Who holds a conversation object; the runtime runs the compiled :data:`CALL` table."""

    free = State(initial=True)
    held = State()

    acquire = free.to(held)
    release = held.to(free)


CALL = compile_machine(CallGate)
