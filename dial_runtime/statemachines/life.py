"""A conversation's own life: open between calls, in a turn while one drives it, and ended for good."""

# Rules of a conversation's life
#
# - A conversation starts `open`. A call that drives it (say, or a decision) begins `in_turn` and finishes back
#   to `open`.
# - While `in_turn`, another call cannot begin: the runtime turns that refusal into ConversationBusy.
# - Ending is allowed from every state and is idempotent.
# - `ended` is terminal for the conversation: a call that begins after the end is accepted and stays `ended`
#   (the person's words are logged, nothing is sent), and a call whose turn ended the conversation finishes
#   in `ended`. Because of those self-transitions python-statemachine cannot declare `ended` final;
#   `terminal_states` marks it final in the compiled table.

from __future__ import annotations

from typing import ClassVar

from statemachine import State, StateMachine

from dial_runtime.statemachines.compiled import compile_machine

__all__ = ["LIFE", "ConversationLife"]


class ConversationLife(StateMachine):
    """The conversation's life; the runtime runs the compiled :data:`LIFE` table."""

    terminal_states: ClassVar[frozenset[str]] = frozenset({"ended"})

    open = State(initial=True)
    in_turn = State()
    ended = State()

    begin = open.to(in_turn) | ended.to(ended)
    finish = in_turn.to(open) | ended.to(ended)
    end = ended.from_(open, in_turn) | ended.to(ended)


LIFE = compile_machine(ConversationLife)
