"""Agents a conversation can talk to: scripted and recorded ones for tests and replays, and :class:`ChatAgent`
for any OpenAI-compatible chat-completions endpoint, with the system prompt generated from the domain."""

from __future__ import annotations

from .chat import AgentError, ChatAgent, ChatMessage, GenerationSettings, history_from_log
from .grammar import Grammar, domain_grammar
from .prompt import VocabularyEntry, system_prompt, vocabulary
from .recorded import RecordedAgent
from .scripted import ScriptedAgent
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
