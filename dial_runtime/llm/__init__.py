"""Agents behind a language model: :class:`ChatAgent` for any OpenAI-compatible chat-completions endpoint (a
hosted model, or llama.cpp's server with a grammar built from the domain), :class:`ResponsesAgent` for the
OpenAI Responses API, :class:`AnthropicAgent` for the Anthropic Messages API, the codecs that say how it speaks to
its model (:mod:`~dial_runtime.llm.codecs`: DIAL, or native tool calls), and :func:`agent_from_uri`, which makes
an agent from the URI the command line takes (``openai:…``, ``anthropic:…``, ``llamacpp:…``, ``http(s)://…#model``,
``script:file``).

The codecs and the grammar need no HTTP library; the agent and the URI bring httpx in when first asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .codecs import CODECS, AnthropicToolCodec, DialCodec, OnResponses, StructuredCodec, ToolCallCodec, codec_for
from .grammar import Grammar, domain_grammar

if TYPE_CHECKING:
    from .anthropic import AnthropicAgent
    from .chat import ChatAgent, ChatMessage, GenerationSettings, history_from_log
    from .responses import ResponsesAgent
    from .uri import agent_from_uri

__all__ = [
    "CODECS",
    "AnthropicAgent",
    "AnthropicToolCodec",
    "ChatAgent",
    "ChatMessage",
    "DialCodec",
    "GenerationSettings",
    "Grammar",
    "OnResponses",
    "ResponsesAgent",
    "StructuredCodec",
    "ToolCallCodec",
    "agent_from_uri",
    "codec_for",
    "domain_grammar",
    "history_from_log",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AnthropicAgent": ".anthropic",
        "ChatAgent": ".chat",
        "ChatMessage": ".chat",
        "GenerationSettings": ".chat",
        "history_from_log": ".chat",
        "ResponsesAgent": ".responses",
        "agent_from_uri": ".uri",
    },
    globals(),
)
