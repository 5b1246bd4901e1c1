"""dial-runtime: run a conversation between a person and an AI agent that speaks DIAL.

The agent proposes; the runtime validates each proposal against the application's domain, shows the valid ones to
the person, runs what the person accepts (or edits), and tells the agent exactly one outcome for every proposal.
"""

from __future__ import annotations

from .agents import AgentError, ChatAgent, RecordedAgent, ScriptedAgent, agent_from_uri, system_prompt
from .errors import ConversationBusy, DialError, DialSizeError, IllegalTransition, LogError
from .jsonl import export_jsonl, import_jsonl
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
from .language.stream import StreamParser
from .replay import Divergence, ReplayReport, replay
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
from .stores import Store, StoreConflict, StoreError, open_store

__version__ = "0.1.0"

__all__ = [
    "Accept",
    "Acknowledge",
    "ActionError",
    "ActionSpec",
    "AgentError",
    "Ask",
    "AskElement",
    "ChatAgent",
    "Conversation",
    "ConversationBusy",
    "Declare",
    "Defer",
    "Delegate",
    "DialError",
    "DialSizeError",
    "Dismiss",
    "Divergence",
    "Edit",
    "Envelope",
    "Event",
    "Execute",
    "IllegalTransition",
    "Inform",
    "Issue",
    "LogEntry",
    "LogError",
    "Option",
    "Outcome",
    "ParseIssue",
    "Phatic",
    "RecordedAgent",
    "ReplayReport",
    "RootAttributes",
    "Say",
    "SchemaIssue",
    "ScriptedAgent",
    "Step",
    "Store",
    "StoreConflict",
    "StoreError",
    "StreamParser",
    "Suggest",
    "Suggestion",
    "TurnResult",
    "__version__",
    "agent_from_uri",
    "event_from_dict",
    "event_to_dict",
    "export_jsonl",
    "extract_prose",
    "import_jsonl",
    "open_store",
    "outcome_reply",
    "parse",
    "policy_human",
    "replay",
    "scripted_human",
    "system_prompt",
    "validate",
]
