"""Agents that need no model: :class:`ScriptedAgent` and :class:`RecordedAgent` for tests and replays, and the
system prompt (:func:`system_prompt`) any agent speaking DIAL is given. Agents behind a model are in
:mod:`dial_runtime.llm`.
"""

from __future__ import annotations

from .._lazy import lazy_exports
from ..errors import AgentError
from .prompt import VocabularyEntry, system_prompt, vocabulary
from .recorded import RecordedAgent
from .scripted import ScriptedAgent

__all__ = ["AgentError", "RecordedAgent", "ScriptedAgent", "VocabularyEntry", "system_prompt", "vocabulary"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {},
    globals(),
    moved={
        **dict.fromkeys(
            ("ChatAgent", "ChatMessage", "GenerationSettings", "history_from_log"), "dial_runtime.llm.chat"
        ),
        **dict.fromkeys(("Grammar", "domain_grammar"), "dial_runtime.llm.grammar"),
        "agent_from_uri": "dial_runtime.llm.uri",
    },
)
