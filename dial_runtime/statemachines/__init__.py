"""The lifecycle rules, declared as state machines and compiled into the tables the runtime runs.

Each machine is declared once with python-statemachine (its module opens with the rules in words) and
compiled at import into a :class:`Table`; the runtime fires events on the tables only.
"""

from __future__ import annotations

from dial_runtime.statemachines.compiled import Table, Transition, compile_machine
from dial_runtime.statemachines.life import LIFE, ConversationLife
from dial_runtime.statemachines.suggestion import NEEDS_REPLY, OUTCOME_STATUS, SUGGESTION, SuggestionLifecycle
from dial_runtime.statemachines.turn_loop import TURN_LOOP, TurnLoop

__all__ = [
    "LIFE",
    "NEEDS_REPLY",
    "OUTCOME_STATUS",
    "SUGGESTION",
    "TURN_LOOP",
    "ConversationLife",
    "SuggestionLifecycle",
    "Table",
    "Transition",
    "TurnLoop",
    "compile_machine",
]
