"""Agents a conversation can talk to: scripted and recorded ones for tests and replays, and :class:`ChatAgent`
for any OpenAI-compatible chat-completions endpoint, with the system prompt generated from the domain.

:class:`ChatAgent`, :class:`ChatMessage`, :class:`GenerationSettings`, :func:`history_from_log` and
:func:`agent_from_uri` are loaded on first use: importing this package does not import httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import AgentError
from .grammar import Grammar, domain_grammar
from .prompt import VocabularyEntry, system_prompt, vocabulary
from .recorded import RecordedAgent
from .scripted import ScriptedAgent

if TYPE_CHECKING:
    from .chat import ChatAgent, ChatMessage, GenerationSettings, history_from_log
    from .uri import agent_from_uri

__all__ = [
    "AgentError",
    "ChatAgent",
    "ChatMessage",
    "GenerationSettings",
    "Grammar",
    "RecordedAgent",
    "ScriptedAgent",
    "VocabularyEntry",
    "agent_from_uri",
    "domain_grammar",
    "history_from_log",
    "system_prompt",
    "vocabulary",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ChatAgent": ".chat",
        "ChatMessage": ".chat",
        "GenerationSettings": ".chat",
        "history_from_log": ".chat",
        "agent_from_uri": ".uri",
    },
    globals(),
)
