"""Agents a conversation can talk to: scripted and recorded ones for tests and replays, and :class:`ChatAgent`
for any OpenAI-compatible chat-completions endpoint, with the system prompt generated from the domain."""

from __future__ import annotations

from ..errors import AgentError
from .chat import ChatAgent, ChatMessage, history_from_log
from .prompt import VocabularyEntry, system_prompt, vocabulary
from .recorded import RecordedAgent
from .scripted import ScriptedAgent
from .uri import agent_from_uri

__all__ = [
    "AgentError",
    "ChatAgent",
    "ChatMessage",
    "RecordedAgent",
    "ScriptedAgent",
    "VocabularyEntry",
    "agent_from_uri",
    "history_from_log",
    "system_prompt",
    "vocabulary",
]
