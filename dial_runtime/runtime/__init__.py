"""The conversation runtime: the driver, its event log and state, and ready-made people."""

from __future__ import annotations

from ..errors import ActionError
from .conversation import HANDLED_ELEMENTS, Conversation
from .humans import policy_human, scripted_human
from .records import (
    Accept,
    ActionSpec,
    Ask,
    Defer,
    Dismiss,
    Edit,
    Issue,
    Say,
    Suggestion,
    TurnResult,
)

__all__ = [
    "HANDLED_ELEMENTS",
    "Accept",
    "ActionError",
    "ActionSpec",
    "Ask",
    "Conversation",
    "Defer",
    "Dismiss",
    "Edit",
    "Issue",
    "Say",
    "Suggestion",
    "TurnResult",
    "policy_human",
    "scripted_human",
]
