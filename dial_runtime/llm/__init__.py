"""Agents behind a language model: :class:`ChatAgent` for any OpenAI-compatible chat-completions endpoint (a
hosted model, or llama.cpp's server with a grammar built from the domain), and :func:`agent_from_uri`, which
makes an agent from the URI the command line takes (``http(s)://…#model``, ``script:file``, ``builtin:…``)."""

from __future__ import annotations

from .chat import ChatAgent, ChatMessage, GenerationSettings, history_from_log
from .grammar import Grammar, domain_grammar
from .uri import agent_from_uri

__all__ = [
    "ChatAgent",
    "ChatMessage",
    "GenerationSettings",
    "Grammar",
    "agent_from_uri",
    "domain_grammar",
    "history_from_log",
]
