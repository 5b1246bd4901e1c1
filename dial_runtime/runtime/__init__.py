"""The sans-IO conversation runtime: the core, its event log, the fold into state, and the values it exchanges."""

from __future__ import annotations

from ..errors import ActionError
from .core import HANDLED_ELEMENTS
from .records import (
    Accept,
    ActionSpec,
    ApprovalPolicy,
    Ask,
    Defer,
    Dismiss,
    Edit,
    IdempotencyKey,
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
    "ApprovalPolicy",
    "Ask",
    "Defer",
    "Dismiss",
    "Edit",
    "IdempotencyKey",
    "Issue",
    "Say",
    "Suggestion",
    "TurnResult",
]
