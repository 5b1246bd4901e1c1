"""dial-runtime: run a conversation between a person and an AI agent that speaks DIAL.

The agent proposes; the runtime validates each proposal against the application's domain, shows the valid ones to
the person, runs what the person accepts (or edits), and tells the agent exactly one outcome for every proposal.

This module holds what an application needs to start; the rest lives in its package: the language
(:mod:`dial_runtime.language`), the exceptions (:mod:`dial_runtime.errors`), the ports (:mod:`dial_runtime.ports`),
what the person sees (:mod:`dial_runtime.views.person`), and each satellite (web, terminal, decisions,
audit, adapters, llm, evaluate).
"""

from __future__ import annotations

import sys as _sys
import typing as _typing

from ._lazy import MovedModules as _MovedModules
from ._lazy import lazy_exports as _lazy_exports
from .agents import RecordedAgent, ScriptedAgent, system_prompt
from .domains import Domain
from .driver import Conversation, policy_human, scripted_human
from .driver.replay import ReplayReport, replay
from .errors import (
    ActionError,
    AgentError,
    AlreadyDecided,
    ConversationBusy,
    DialError,
    PayloadChanged,
    StoreError,
)
from .language.outcomes import Outcome
from .language.parser import parse
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
from .runtime.events import Event, LogEntry
from .stores import open_store
from .stores.jsonl import export_jsonl, import_jsonl

if _typing.TYPE_CHECKING:
    from .llm.chat import ChatAgent
    from .llm.uri import agent_from_uri
    from .views.person import Projection, project

__version__ = "0.1.0"

__all__ = [
    "Accept",
    "ActionError",
    "ActionSpec",
    "AgentError",
    "AlreadyDecided",
    "ApprovalPolicy",
    "Ask",
    "ChatAgent",
    "Conversation",
    "ConversationBusy",
    "Defer",
    "DialError",
    "Dismiss",
    "Domain",
    "Edit",
    "Event",
    "IdempotencyKey",
    "Issue",
    "LogEntry",
    "Outcome",
    "PayloadChanged",
    "Projection",
    "RecordedAgent",
    "ReplayReport",
    "Say",
    "ScriptedAgent",
    "StoreError",
    "Suggestion",
    "TurnResult",
    "__version__",
    "agent_from_uri",
    "export_jsonl",
    "import_jsonl",
    "open_store",
    "parse",
    "policy_human",
    "project",
    "replay",
    "scripted_human",
    "system_prompt",
]

#: Names this module exported before 0.2, each found at its home for one more release (with a warning).
_MOVED_NAMES = {
    **dict.fromkeys(
        [
            "DialSizeError",
            "IllegalTransition",
            "LinkRefused",
            "LogError",
            "StoreClosed",
            "StoreConflict",
            "TokenLimitReached",
        ],
        "dial_runtime.errors",
    ),
    **dict.fromkeys(
        [
            "Acknowledge",
            "AskElement",
            "Declare",
            "Delegate",
            "Envelope",
            "Execute",
            "Inform",
            "Option",
            "ParseIssue",
            "Phatic",
            "RootAttributes",
            "Step",
            "Suggest",
        ],
        "dial_runtime.language.records",
    ),
    "extract_prose": "dial_runtime.language.parser",
    "outcome_reply": "dial_runtime.language.outcomes",
    "SchemaIssue": "dial_runtime.language.schema",
    "validate": "dial_runtime.language.schema",
    "StreamParser": "dial_runtime.language.stream",
    **dict.fromkeys(
        ["AgentPort", "DomainPort", "HumanPort", "ReconcilingDomainPort", "StorePort", "StreamingAgentPort"],
        "dial_runtime.ports",
    ),
    "Divergence": "dial_runtime.driver.replay",
    "event_from_dict": "dial_runtime.runtime.events",
    "event_to_dict": "dial_runtime.runtime.events",
    **dict.fromkeys(
        [
            "AgentText",
            "Aside",
            "Card",
            "Moment",
            "Notice",
            "PersonWords",
            "Question",
            "RefusedProposal",
            "Told",
            "Waiting",
        ],
        "dial_runtime.views.person",
    ),
}

# What needs httpx is imported on first use, so ``import dial_runtime`` loads no HTTP library; the projection,
# which only a surface reads, is imported when first asked for too.
__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "ChatAgent": ".llm.chat",
        "agent_from_uri": ".llm.uri",
        "Projection": ".views.person",
        "project": ".views.person",
    },
    globals(),
    moved=_MOVED_NAMES,
)

if not any(isinstance(finder, _MovedModules) for finder in _sys.meta_path):
    _sys.meta_path.append(_MovedModules())
