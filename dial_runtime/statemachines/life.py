"""A conversation's own life: open between calls, in a turn while a call drives it, and ended for good."""

# Rules of a conversation's life
#
# - A conversation starts `open`. A call that drives it (say, a decision, an answer, a resume) begins `in_turn`
#   and finishes back to `open`.
# - While a call is in progress (`in_turn` or `ending`), another call cannot begin: the runtime turns that
#   refusal into ConversationBusy.
# - Between calls nothing happens but a call beginning, the conversation ending, and someone claiming,
#   releasing or assigning a card that waits for a decision (BETWEEN_CALLS); those happen between calls only
#   (CARD_HOLDING): a call holds the conversation.
# - Ending is allowed from every state and is idempotent. Ended during a call, the conversation is `ending`:
#   the current reply is handled to its end, then the call finishes `ended`. Ended between calls it is `ended`
#   at once.
# - `ended` is terminal: a call that begins after the end is accepted, runs `ending` and finishes `ended` again
#   (the person's words are logged, a deferred decision is still taken).
# - An ended conversation never talks to the agent again: while `ending` no message is sent and no new turn
#   starts (SILENT).

from __future__ import annotations

from typing import ClassVar, Literal

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["BETWEEN_CALLS", "CARD_HOLDING", "ENDED", "IN_CALL", "LIFE", "SILENT", "ConversationLife", "LifeState"]


class ConversationLife(StateMachine):
    """The conversation's life; the runtime runs the compiled :data:`LIFE` table."""

    # python-statemachine cannot declare a state with outgoing transitions final; the table marks it final.
    terminal_states: ClassVar[frozenset[str]] = frozenset({"ended"})

    open = State(initial=True)
    in_turn = State()
    ending = State()
    ended = State()

    begin = open.to(in_turn) | ended.to(ending)
    finish = in_turn.to(open) | ending.to(ended)
    end = ending.from_(in_turn, ending) | ended.from_(open, ended)


LIFE = compile_machine(ConversationLife)

LifeState = Literal["open", "in_turn", "ending", "ended"]
"""A conversation's life state (a test holds it equal to the table's states)."""

ENDED = LIFE.targets("end")
"""The life states of a conversation that has ended."""

IN_CALL = LIFE.sources("finish")
"""The life states of a conversation while a call drives it."""

CARD_HOLDING = frozenset({"claimed", "released", "assigned"})
"""The events that say who holds a waiting card: a log holds them between calls only."""

BETWEEN_CALLS = frozenset({"said", "resumed", "ended"}) | CARD_HOLDING
"""The events a log can hold between calls: a call beginning, the conversation ending, or who holds a card."""

SILENT = frozenset({"sent", "turn-limit"})
"""The events a conversation that has ended never logs again: it sends nothing, starts no turn."""
