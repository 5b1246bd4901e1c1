"""An agent behind the OpenAI Responses API (``POST {base_url}/responses``): OpenAI's newer API, which
llama.cpp's ``llama-server`` (and other OpenAI-compatible servers) answer too.

:class:`ResponsesAgent` is a :class:`~dial_runtime.llm.ChatAgent` on another wire: the same history, retries (the
package's one retry policy; ``Retry-After`` honoured), deadlines, streaming and errors, and the same codecs
(DIAL, ``tools``, ``json``), each spoken through :class:`~dial_runtime.llm.codecs.OnResponses`. The request
carries the history as ``input`` items, the system prompt as ``instructions``, ``max_tokens`` as
``max_output_tokens`` and ``store: false``: the runtime's log is the conversation's record, so nothing is kept on
the provider's side and every request carries the whole history, as with the chat API. The API has no ``seed``
(it is left out) and no stop sequences (refused), and takes no grammar.

A streamed answer's events (``response.output_text.delta``, ``response.output_item.added`` for a
``function_call``, ``response.function_call_arguments.delta``, ``response.output_item.done``, then
``response.completed``; or ``response.incomplete``, ``response.failed``, ``error``) are read as they come: the
text reaches the person as it arrives, each call becomes a suggestion once the response is complete, a stream
that ends without a final event is broken off, and a response cut at ``max_output_tokens`` is the token limit.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from ..errors import AgentError, TokenLimitReached
from .chat import _QUOTE_LIMIT, ChatAgent, _Assembled, _events, _lines
from .codecs import Codec, DialCodec, OnResponses, chat_message, responses_input

__all__ = ["ResponsesAgent"]

# The events that end a streamed response.
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponsesAgent(ChatAgent):
    """An agent behind the OpenAI Responses API (see the module docstring); its options are ChatAgent's, but for
    ``stop`` and ``grammar``, which the API has not."""

    api = "openai-responses"
    path = "/responses"
    own_fields = frozenset({"model", "input", "stream"})

    def __init__(self, base_url: str, model: str, *, codec: Codec | None = None, **options: Any) -> None:
        if options.get("grammar") is not None:
            raise ValueError("ResponsesAgent: the Responses API takes no grammar")
        settings = options.get("settings")
        if options.get("stop") or (settings is not None and settings.stop):
            raise ValueError("ResponsesAgent: the Responses API takes no stop sequences")
        inner = DialCodec() if codec is None else codec
        wrapped = inner if isinstance(inner, OnResponses) else OnResponses(inner)
        super().__init__(base_url, model, codec=wrapped, **options)

    # --- the wire ------------------------------------------------------------------------------------------

    def _start(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "input": responses_input(messages), "store": False}
        if self.system_prompt:
            body["instructions"] = self.system_prompt
        return body

    def _settings(self) -> dict[str, Any]:
        settings = self.settings.body()
        if "max_tokens" in settings:
            settings["max_output_tokens"] = settings.pop("max_tokens")
        settings.pop("seed", None)  # the API has none
        return settings

    def _completion_message(self, response: httpx.Response) -> dict[str, Any]:
        """A whole response's output items; :class:`TokenLimitReached` when it stopped at its token limit."""
        data = self._completion(response)
        return self._output(data, response.status_code)

    def _output(self, data: Any, status: int) -> dict[str, Any]:
        """A finished response's output items (``{"output": [...]}``), or why there are none: the token limit,
        a failed or incomplete response, an error."""
        self._raise_reported(data, status)
        output = data.get("output") if isinstance(data, dict) else None
        if not isinstance(output, list):
            shown = json.dumps(data, ensure_ascii=False)[:_QUOTE_LIMIT]
            raise AgentError(self._redact(f"{self._url}: no output in {shown}"), status=status)
        if data.get("status") == "incomplete":
            details = data.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            if reason == "max_output_tokens":
                raise self._token_limit(status)
            raise AgentError(self._redact(f"{self._url}: the response is incomplete: {reason}"), status=status)
        return {"output": output}

    def _raise_reported(self, data: Any, status: int) -> None:
        """``AgentError`` for a response or event that reports an error (a failed response, an error event)."""
        if not isinstance(data, dict):
            return
        error = data.get("error")
        if data.get("type") == "error":  # a stream's error event carries the message itself
            error = error or data
        if error or data.get("status") == "failed":
            message = error.get("message", error) if isinstance(error, dict) else error or "the response failed"
            raise AgentError(self._redact(f"{self._url}: the server reported an error: {message}"), status=status)

    def _token_limit(self, status: int) -> TokenLimitReached:
        reason = f"{self._url}: the answer reached the token limit (max_output_tokens)"
        return TokenLimitReached(reason, status=status)

    async def _stream_deltas(self, response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
        """The events of a streamed response as deltas of the chat-completions form (text as ``content``, a
        ``function_call`` item's start and its arguments as ``tool_calls`` fragments), up to its final event."""
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
            for delta in _ResponseEvents().whole(self._completion_message(response)["output"]):
                yield delta
            return
        status = response.status_code
        reading = _ResponseEvents()
        async with _lines(response) as lines, contextlib.aclosing(_events(lines)) as events:
            async for text in events:
                event = self._decoded(text, status)
                self._raise_reported(event, status)
                kind = event.get("type") if isinstance(event, dict) else None
                if kind in _FINAL:
                    self._output(event.get("response"), status)
                    break
                for delta in reading.deltas(event):
                    yield delta
            else:
                reason = f"{self._url}: the streamed answer ended without response.completed"
                raise AgentError(reason, status=status)

    def _streamed_message(self, assembled: _Assembled) -> dict[str, Any]:
        """The response's output items, as the API gives them: a message item, then a ``function_call`` item
        per call."""
        output: list[dict[str, Any]] = []
        if assembled.pieces:
            text = {"type": "output_text", "text": assembled.content(), "annotations": []}
            output.append({"type": "message", "role": "assistant", "content": [text]})
        for _, call in sorted(assembled.calls.items()):
            arguments = "".join(call["arguments"])
            output.append(
                {"type": "function_call", "call_id": call["id"], "name": call["name"], "arguments": arguments}
            )
        return {"output": output}


class _ResponseEvents:
    """A streamed response's events as chat-completions deltas: each ``function_call`` item numbered in the
    order it was added, its arguments from its delta events (or, from a server that sends none, whole from the
    item's ``done`` event)."""

    def __init__(self) -> None:
        self._places: dict[str, int] = {}
        self._streamed: set[str] = set()

    def deltas(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The deltas one event gives: text, a call's start, a piece of its arguments; none for the rest."""
        kind = event.get("type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = event.get("delta")
            return [{"content": delta}] if isinstance(delta, str) and delta else []
        if kind == "response.function_call_arguments.delta":
            key, delta = str(event.get("item_id")), event.get("delta")
            if key not in self._places or not isinstance(delta, str):
                return []
            self._streamed.add(key)
            return [_arguments(self._places[key], delta)]
        item = event.get("item")
        if not (isinstance(item, Mapping) and item.get("type") == "function_call"):
            return []
        key = str(item.get("id") or item.get("call_id"))
        deltas = []
        if key not in self._places:  # added, or done without having been added
            self._places[key] = len(self._places)
            function = {"name": item.get("name") or "", "arguments": ""}
            deltas.append(
                {
                    "tool_calls": [
                        {"index": self._places[key], "id": item.get("call_id") or "", "function": function}
                    ]
                }
            )
        arguments = item.get("arguments")
        if kind == "response.output_item.done" and key not in self._streamed and isinstance(arguments, str):
            deltas.append(_arguments(self._places[key], arguments))
        return deltas

    def whole(self, output: list[Any]) -> list[dict[str, Any]]:
        """A whole response's output items as deltas."""
        deltas: list[dict[str, Any]] = []
        for item in output:
            if isinstance(item, Mapping) and item.get("type") == "message":
                text = chat_message({"output": [item]})["content"]
                if text:
                    deltas.append({"content": text})
            else:
                deltas += self.deltas({"type": "response.output_item.done", "item": item})
        return deltas


def _arguments(place: int, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": place, "function": {"arguments": text}}]}
