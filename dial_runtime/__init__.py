"""dial-runtime: run a conversation between a person and an AI agent that speaks DIAL.

The agent proposes; the runtime validates each proposal against the application's domain, shows the valid ones to
the person, runs what the person accepts (or edits), and tells the agent exactly one outcome for every proposal.
"""

from __future__ import annotations

import typing as _typing

from ._lazy import lazy_exports as _lazy_exports
from .agents import RecordedAgent, ScriptedAgent, system_prompt
from .domains import Domain
from .driver import Conversation, policy_human, scripted_human
from .errors import (
    ActionError,
    AgentError,
    AlreadyDecided,
    ConversationBusy,
    DialError,
    DialSizeError,
    IllegalTransition,
    LinkRefused,
    LogError,
    PayloadChanged,
    StoreClosed,
    StoreConflict,
    StoreError,
    TokenLimitReached,
)
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
from .ports import AgentPort, DomainPort, HumanPort, ReconcilingDomainPort, StorePort, StreamingAgentPort
from .replay import Divergence, ReplayReport, replay
from .runtime import (
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
from .runtime.events import Event, LogEntry, event_from_dict, event_to_dict
from .stores import open_store

if _typing.TYPE_CHECKING:
    from .agents.chat import ChatAgent
    from .agents.uri import agent_from_uri
    from .runtime.projection import (
        AgentText,
        Aside,
        Card,
        Moment,
        Notice,
        PersonWords,
        Projection,
        Question,
        RefusedProposal,
        Told,
        Waiting,
        project,
    )

__version__ = "0.1.0"

__all__ = [
    "Accept",
    "Acknowledge",
    "ActionError",
    "ActionSpec",
    "AgentError",
    "AgentPort",
    "AgentText",
    "AlreadyDecided",
    "ApprovalPolicy",
    "Aside",
    "Ask",
    "AskElement",
    "Card",
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
    "Domain",
    "DomainPort",
    "Edit",
    "Envelope",
    "Event",
    "Execute",
    "HumanPort",
    "IdempotencyKey",
    "IllegalTransition",
    "Inform",
    "Issue",
    "LinkRefused",
    "LogEntry",
    "LogError",
    "Moment",
    "Notice",
    "Option",
    "Outcome",
    "ParseIssue",
    "PayloadChanged",
    "PersonWords",
    "Phatic",
    "Projection",
    "Question",
    "ReconcilingDomainPort",
    "RecordedAgent",
    "RefusedProposal",
    "ReplayReport",
    "RootAttributes",
    "Say",
    "SchemaIssue",
    "ScriptedAgent",
    "Step",
    "StoreClosed",
    "StoreConflict",
    "StoreError",
    "StorePort",
    "StreamParser",
    "StreamingAgentPort",
    "Suggest",
    "Suggestion",
    "TokenLimitReached",
    "Told",
    "TurnResult",
    "Waiting",
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
    "project",
    "replay",
    "scripted_human",
    "system_prompt",
    "validate",
]

_PROJECTION = (
    "AgentText Aside Card Moment Notice PersonWords Projection Question RefusedProposal Told Waiting project"
)

# What needs httpx is imported on first use, so ``import dial_runtime`` loads no HTTP library; the projection,
# which only a surface reads, is imported when first asked for too.
__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ChatAgent": ".agents.chat",
        "agent_from_uri": ".agents.uri",
        **dict.fromkeys(_PROJECTION.split(), ".runtime.projection"),
    },
    globals(),
)
