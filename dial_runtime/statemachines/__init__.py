"""The lifecycle rules, declared as state machines and compiled into the tables the runtime runs.

Each machine is declared once with python-statemachine (its module opens with the rules in words) and
compiled at import into a :class:`Table`; the runtime fires events on the tables only.
"""

from __future__ import annotations

from dial_runtime.statemachines.call import CALL, CallGate
from dial_runtime.statemachines.claim import CLAIM, CLAIM_REFUSALS, ClaimRules, ClaimVerdict
from dial_runtime.statemachines.compiled import Table, Transition, compile_machine
from dial_runtime.statemachines.decision import DECISION, DECISION_REFUSALS, DecisionRules, DecisionVerdict
from dial_runtime.statemachines.life import (
    BETWEEN_CALLS,
    CARD_HOLDING,
    ENDED,
    IN_CALL,
    LIFE,
    SILENT,
    ConversationLife,
    LifeState,
)
from dial_runtime.statemachines.suggestion import (
    DECIDING,
    FINAL_STATE,
    MOVES_FLOW,
    NEEDS_REPLY,
    OUTCOME_STATUS,
    RUNNING,
    SUCCEEDED,
    SUGGESTION,
    OutcomeStatus,
    OutcomeTrigger,
    SuggestionLifecycle,
    SuggestionState,
)
from dial_runtime.statemachines.turn_loop import CALL_STATUS, TURN_LOOP, CallStatus, LoopState, TurnLoop

__all__ = [
    "BETWEEN_CALLS",
    "CALL",
    "CALL_STATUS",
    "CARD_HOLDING",
    "CLAIM",
    "CLAIM_REFUSALS",
    "DECIDING",
    "DECISION",
    "DECISION_REFUSALS",
    "ENDED",
    "FINAL_STATE",
    "IN_CALL",
    "LIFE",
    "MOVES_FLOW",
    "NEEDS_REPLY",
    "OUTCOME_STATUS",
    "RUNNING",
    "SILENT",
    "SUCCEEDED",
    "SUGGESTION",
    "TURN_LOOP",
    "CallGate",
    "CallStatus",
    "ClaimRules",
    "ClaimVerdict",
    "ConversationLife",
    "DecisionRules",
    "DecisionVerdict",
    "LifeState",
    "LoopState",
    "OutcomeStatus",
    "OutcomeTrigger",
    "SuggestionLifecycle",
    "SuggestionState",
    "Table",
    "Transition",
    "TurnLoop",
    "compile_machine",
]
