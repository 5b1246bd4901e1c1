"""An agent behind the Anthropic Messages API (``POST {base_url}/v1/messages``): Claude, or any server that
answers the same API (llama.cpp's ``llama-server`` does).

:class:`AnthropicAgent` is a :class:`~dial_runtime.llm.ChatAgent` on another wire: the same history, retries
(the package's one retry policy; ``Retry-After`` honoured), deadlines, streaming and errors, with the API key in
``x-api-key``, the ``anthropic-version`` header, the system prompt as the request's ``system``, ``max_tokens``
always sent (the API requires it: 1,024 unless given) and ``stop`` as ``stop_sequences``. Its codec is the
Anthropic tool-call codec (:class:`~dial_runtime.llm.codecs.AnthropicToolCodec`: ``tool_use`` and
``tool_result`` blocks) or DIAL; the API has no structured output to constrain a reply with, so no JSON codec.

A streamed reply's events (``content_block_start``, ``content_block_delta`` with ``text_delta`` or
``input_json_delta``, ``message_delta`` with the stop reason, ``message_stop``, ``error``) are read as they come:
the text reaches the person as it arrives, each ``tool_use`` becomes a suggestion once the message is complete,
a stream that ends without ``message_stop`` is broken off, and ``max_tokens`` as the stop reason is the token
limit, as with the chat-completions API. The wire is spoken with httpx for the reasons
:mod:`dial_runtime.llm.chat` gives; the tests check it against a real server through the official ``anthropic``
client.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from ..errors import AgentError
from .chat import _QUOTE_LIMIT, ChatAgent, _Assembled, _events, _lines
from .codecs import Codec

__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION", "AnthropicAgent"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
#: The API version every request names.
ANTHROPIC_VERSION = "2023-06-01"
#: ``max_tokens`` when none is given: the API requires one.
DEFAULT_MAX_TOKENS = 1024


class AnthropicAgent(ChatAgent):
    """An agent behind the Anthropic Messages API (see the module docstring); its options are ChatAgent's."""

    api = "anthropic-messages"
    path = "/v1/messages"

    def __init__(
        self, base_url: str = ANTHROPIC_BASE_URL, model: str = "", *, codec: Codec | None = None, **options: Any
    ) -> None:
        if options.get("grammar") is not None:
            raise ValueError("AnthropicAgent: the Anthropic API takes no grammar")
        super().__init__(base_url, model, codec=codec, **options)
        self._headers["anthropic-version"] = ANTHROPIC_VERSION

    #: Claude is trained for tool calls.
    default_codec = "tools"

    def __repr__(self) -> str:
        key = "'<hidden>'" if self._api_key else "None"
        return f"AnthropicAgent(base_url={self.base_url!r}, model={self.model!r}, api_key={key})"

    # --- the wire ------------------------------------------------------------------------------------------

    def _authorization(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def _start(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.system_prompt:
            body["system"] = self.system_prompt
        return body

    def _settings(self) -> dict[str, Any]:
        settings = self.settings.body()
        if "stop" in settings:
            settings["stop_sequences"] = settings.pop("stop")
        settings.pop("seed", None)  # the API has none
        settings.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        return settings

    def _completion_message(self, response: httpx.Response) -> dict[str, Any]:
        """The message of a whole answer: its role and content blocks; :class:`TokenLimitReached` when it
        stopped at the token limit."""
        data = self._completion(response)
        self._raise_reported(data, response.status_code)
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list):
            shown = json.dumps(data, ensure_ascii=False)[:_QUOTE_LIMIT]
            raise AgentError(self._redact(f"{self._url}: no content in {shown}"), status=response.status_code)
        if data.get("stop_reason") == "max_tokens":
            raise self._token_limit(response.status_code)
        return {"role": "assistant", "content": content}

    def _raise_reported(self, data: Any, status: int) -> None:
        """``AgentError`` for a body or event that reports an error."""
        if isinstance(data, dict) and (data.get("type") == "error" or "error" in data):
            error = data.get("error")
            message = error.get("message", error) if isinstance(error, dict) else error
            raise AgentError(self._redact(f"{self._url}: the server reported an error: {message}"), status=status)

    async def _stream_deltas(self, response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
        """The events of a streamed answer as deltas of the chat-completions form (text as ``content``, a
        ``tool_use`` block's start and its input's JSON as ``tool_calls`` fragments), up to ``message_stop``."""
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
            message = self._completion_message(response)
            for index, block in enumerate(message["content"]):
                yield _as_delta(index, block)
            return
        stop_reason: str | None = None
        status = response.status_code
        async with _lines(response) as lines, contextlib.aclosing(_events(lines)) as events:
            async for text in events:
                event = self._decoded(text, status)
                self._raise_reported(event, status)
                kind = event.get("type") if isinstance(event, dict) else None
                if kind == "content_block_start":
                    yield _as_delta(event.get("index", 0), event.get("content_block") or {})
                elif kind == "content_block_delta":
                    delta = event.get("delta") or {}
                    if delta.get("type") == "text_delta":
                        yield {"content": delta.get("text", "")}
                    elif delta.get("type") == "input_json_delta":
                        fragment = {
                            "index": event.get("index", 0),
                            "function": {"arguments": delta["partial_json"]},
                        }
                        yield {"tool_calls": [fragment]}
                elif kind == "message_delta":
                    stop_reason = (event.get("delta") or {}).get("stop_reason") or stop_reason
                elif kind == "message_stop":
                    break
            else:
                raise AgentError(f"{self._url}: the streamed answer ended without message_stop", status=status)
        if stop_reason == "max_tokens":
            raise self._token_limit(status)

    def _streamed_message(self, assembled: _Assembled) -> dict[str, Any]:
        """The whole message, as the API gives it: a text block, then a ``tool_use`` block per call."""
        blocks: list[dict[str, Any]] = []
        if assembled.pieces:
            blocks.append({"type": "text", "text": assembled.content()})
        for _, call in sorted(assembled.calls.items()):
            arguments = "".join(call["arguments"]) or "{}"
            try:
                given: Any = json.loads(arguments)
            except ValueError:
                given = arguments
            blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": given})
        return {"role": "assistant", "content": blocks}


def _as_delta(index: int, block: Mapping[str, Any]) -> dict[str, Any]:
    """A content block's start as a chat-completions delta: its text, or a call's id and name (and its input,
    when the block came whole)."""
    if block.get("type") == "text":
        return {"content": block.get("text", "")}
    if block.get("type") == "tool_use":
        given = block.get("input")
        arguments = "" if given in (None, {}) else json.dumps(given, ensure_ascii=False)
        function = {"name": block.get("name", ""), "arguments": arguments}
        return {"tool_calls": [{"index": index, "id": block.get("id", ""), "function": function}]}
    return {}
