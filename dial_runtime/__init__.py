"""dial-runtime: run a conversation between a person and an AI agent that speaks DIAL.

The agent proposes; the runtime validates each proposal against the application's domain, shows the valid ones to
the person, runs what the person accepts (or edits), and tells the agent exactly one outcome for every proposal.
"""

from __future__ import annotations

from .errors import ConversationBusy, DialError, DialSizeError, IllegalTransition
from .language.outcomes import Outcome, outcome_reply
from .language.parser import extract_prose, parse
from .language.records import (
    Acknowledge,
    AskElement,
    Declare,
    Delegate,
    Envelope,
    Execute,
    Inform,
    Option,
    ParseIssue,
    Phatic,
    RootAttributes,
    Step,
    Suggest,
)
from .language.schema import SchemaIssue, validate
from .runtime import (
    Accept,
    ActionError,
    ActionSpec,
    Ask,
    Conversation,
    Defer,
    Dismiss,
    Edit,
    Issue,
    Say,
    Suggestion,
    TurnResult,
    policy_human,
    scripted_human,
)
from .runtime.events import Event, LogEntry, event_from_dict, event_to_dict

__version__ = "0.1.0"

__all__ = [
    "Accept",
    "Acknowledge",
    "ActionError",
    "ActionSpec",
    "Ask",
    "AskElement",
    "Conversation",
    "ConversationBusy",
    "Declare",
    "Delegate",
    "Defer",
    "DialError",
    "DialSizeError",
    "Dismiss",
    "Edit",
    "Envelope",
    "Event",
    "Execute",
    "IllegalTransition",
    "Inform",
    "Issue",
    "LogEntry",
    "Option",
    "Outcome",
    "ParseIssue",
    "Phatic",
    "RootAttributes",
    "Say",
    "SchemaIssue",
    "Step",
    "Suggest",
    "Suggestion",
    "TurnResult",
    "__version__",
    "event_from_dict",
    "event_to_dict",
    "extract_prose",
    "outcome_reply",
    "parse",
    "policy_human",
    "scripted_human",
    "validate",
]
