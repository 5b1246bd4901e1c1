"""A real chat-completions server on 127.0.0.1, for tests and benchmarks of agents that speak HTTP.

It answers ``POST <anything>/chat/completions`` from a script, one step per request, and records every request.
A request with ``"stream": true`` gets its reply as server-sent events (``data: {...}`` chunks carrying
``choices[0].delta.content``, then ``data: [DONE]``) in chunked transfer encoding; any other gets one JSON
completion::

    with OpenAIServer([Error(429, retry_after=0.1), Reply("Hello there!", chunks=3, interval=0.01)]) as server:
        agent = ChatAgent(server.base_url, "any-model")
        ...
    server.requests[1].body["messages"], server.requests[1].headers["authorization"]

Steps, taken in order:

- ``Reply(text, chunks=1, interval=0.0, delay=0.0, drop_after=None, hold_after=None, finish_reason="stop")``:
  answer ``text`` with ``finish_reason`` (``"length"``: as a model at its token limit; streamed, the last chunk
  carries it).
  Streamed, it is split into ``chunks`` pieces of near-equal length sent ``interval`` seconds apart;
  ``drop_after=N`` closes the connection after N content pieces, mid-body (``0``: right after the headers and the
  role chunk); ``hold_after=N`` sends N pieces and holds the rest until the server closes (a reply whose end is
  still on its way, for as long as a test needs).
  ``tool_calls=[Call(id, name, arguments), ...]`` adds tool calls after the text (``finish_reason`` is then
  ``tool_calls`` unless given); streamed, each call's first delta carries its id and name, then its arguments
  come in ``chunks`` pieces, and ``drop_after`` and ``hold_after`` count these pieces after the text's;
  ``error_after=N`` sends an error event (the API's own) after N pieces and ends the stream there.
  ``POST .../v1/messages`` answers the same steps as the Anthropic Messages API does (a message of content
  blocks, or its stream of named events), and ``POST .../responses`` as the OpenAI Responses API does (a
  response of output items, or its stream of ``response.*`` events; ``finish_reason="length"`` is an incomplete
  response at ``max_output_tokens``).
- ``Error(status, message="scripted error", retry_after=None, body=None, delay=0.0)``: answer ``status`` with an
  OpenAI-style ``{"error": {"message", "type", "code"}}`` body (or the text ``body`` instead) and, when given, a
  ``Retry-After`` header.
- ``Drop(delay=0.0)``: close the connection without answering.
- a ``str``: ``Reply(text)``; a callable: it gets the :class:`Request` and returns one of the above.

``delay`` waits that many seconds before answering. Waits are real time, and closing the server interrupts them.
When the script runs out, ``default`` answers (when given); otherwise the server answers HTTP 400 naming the
request, which a client does not retry, so an unexpected request fails at once. ``add(*steps)`` appends steps
while the server runs; ``remaining`` counts the steps left; ``errors`` holds any exception a handler raised
(client disconnects aside).

The server is ``http.server.ThreadingHTTPServer`` on a free port, in a background thread, a thread per connection,
HTTP/1.1 keep-alive. ``close()`` (or leaving the ``with`` block) stops accepting, ends open connections and joins
every thread. As a pytest fixture::

    @pytest.fixture
    def server() -> Iterator[OpenAIServer]:
        with OpenAIServer() as running:
            yield running
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import attrs

__all__ = ["Call", "Drop", "Error", "OpenAIServer", "Reply", "Request", "Step"]

# OpenAI's error types by status, for the error bodies.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}


@attrs.frozen(kw_only=True)
class Request:
    """One request the server received: header names lower-cased, the body as JSON (``None`` when it is not),
    the raw body, and ``time.monotonic()`` when it arrived."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes
    received: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages the request sent."""
        return list(self.body["messages"])

    @property
    def stream(self) -> bool:
        """Whether the request asked for a streamed answer."""
        return isinstance(self.body, dict) and self.body.get("stream") is True


@attrs.frozen
class Call:
    """A tool call of a reply: its id (``""``: none), the tool's name and the arguments as sent (JSON text, or
    any text a model might write)."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class Reply:
    """Answer ``text``: whole, or streamed in ``chunks`` pieces ``interval`` seconds apart (see the module)."""

    text: str
    chunks: int = attrs.field(default=1, kw_only=True)
    interval: float = attrs.field(default=0.0, kw_only=True)
    delay: float = attrs.field(default=0.0, kw_only=True)
    drop_after: int | None = attrs.field(default=None, kw_only=True)
    hold_after: int | None = attrs.field(default=None, kw_only=True)
    finish_reason: str = attrs.field(default="stop", kw_only=True)
    tool_calls: tuple[Call, ...] = attrs.field(default=(), kw_only=True, converter=tuple)
    error_after: int | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class Error:
    """Answer HTTP ``status`` with an error body and an optional ``Retry-After`` header."""

    status: int
    message: str = "scripted error"
    retry_after: str | float | None = attrs.field(default=None, kw_only=True)
    body: str | None = attrs.field(default=None, kw_only=True)
    delay: float = attrs.field(default=0.0, kw_only=True)


@attrs.frozen
class Drop:
    """Close the connection without answering."""

    delay: float = attrs.field(default=0.0, kw_only=True)


Action = Reply | Error | Drop
Step = Action | str | Callable[[Request], Action | str]


class OpenAIServer:
    """A chat-completions server on 127.0.0.1 answering from a script of steps (see the module docstring)."""

    host = "127.0.0.1"

    def __init__(self, steps: Iterable[Step] = (), *, default: Step | None = None) -> None:
        self.default = default
        self._steps: collections.deque[Step] = collections.deque(steps)
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._errors: list[BaseException] = []
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ public

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if self._httpd is None:
            raise RuntimeError("OpenAIServer: not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The base URL an OpenAI-compatible client takes: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> tuple[Request, ...]:
        """Every request received so far, in order."""
        with self._lock:
            return tuple(self._requests)

    @property
    def errors(self) -> tuple[BaseException, ...]:
        """Exceptions raised while answering (a client that went away is not one)."""
        with self._lock:
            return tuple(self._errors)

    @property
    def remaining(self) -> int:
        """How many scripted steps have not been used."""
        with self._lock:
            return len(self._steps)

    def add(self, *steps: Step) -> None:
        """Append steps to the script."""
        with self._lock:
            self._steps.extend(steps)

    def start(self) -> OpenAIServer:
        """Listen on a free port and serve in a background thread."""
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="openai-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: interrupt waits, end open connections, join every thread."""
        if self._httpd is None or self._thread is None:
            return
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.end_connections()
        self._httpd.server_close()
        self._thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ handler side

    def _record(self, request: Request) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def _next_action(self, request: Request, number: int) -> Action:
        with self._lock:
            step = self._steps.popleft() if self._steps else self.default
        if step is None:
            return Error(400, f"openai_server: no scripted step left for request {number}")
        if callable(step):
            step = step(request)
        return Reply(step) if isinstance(step, str) else step

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds``; ``False`` when the server closed meanwhile."""
        return seconds <= 0 or not self._closing.wait(seconds)

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._errors.append(error)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # joined by server_close()

    def __init__(self, owner: OpenAIServer) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((owner.host, 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host name up, which may wait on DNS; the name is not needed.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.owner.host, int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def end_connections(self) -> None:
        """Shut every open connection, so the threads waiting on keep-alive reads finish."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, OSError):
            self.owner._failed(error)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds a connection may sit idle
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output clean."""

    def do_GET(self) -> None:
        self._record()
        self._send_json(404, _error_body(404, f"no such endpoint: GET {self.path}"))

    def do_POST(self) -> None:
        owner = self.server.owner
        request, number = self._record()
        path = self.path.split("?")[0].rstrip("/")
        anthropic = path.endswith("/v1/messages")
        responses = path.endswith("/responses")
        if not (anthropic or responses or path.endswith("/chat/completions")):
            self._send_json(404, _error_body(404, f"no such endpoint: POST {self.path}"))
            return
        action = owner._next_action(request, number)
        try:
            if not owner._wait(action.delay) or isinstance(action, Drop):
                self.close_connection = True
            elif isinstance(action, Error):
                self._send_error(action)
            elif anthropic and request.stream:
                self._send_anthropic_stream(action, number)
            elif anthropic:
                self._send_json(200, _anthropic_message(action, number))
            elif responses and request.stream:
                self._send_responses_stream(action, number)
            elif responses:
                self._send_json(200, _response(action, number))
            elif request.stream:
                self._send_stream(action, request, number)
            else:
                self._send_json(200, _completion(action, request, number))
        except OSError:  # the client went away
            self.close_connection = True

    # ------------------------------------------------------------------------------------------ writing

    def _record(self) -> tuple[Request, int]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = Request(
            method=self.command,
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
            raw=raw,
            received=time.monotonic(),
        )
        return request, self.server.owner._record(request)

    def _send_json(self, status: int, data: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(data).encode(), "application/json", headers)

    def _send_bytes(
        self, status: int, payload: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_error(self, error: Error) -> None:
        headers = {}
        if error.retry_after is not None:
            value = error.retry_after
            headers["Retry-After"] = f"{value:g}" if isinstance(value, (int, float)) else value
        if error.body is not None:
            self._send_bytes(error.status, error.body.encode(), "text/plain; charset=utf-8", headers)
        else:
            self._send_json(error.status, _error_body(error.status, error.message), headers)

    def _send_stream(self, reply: Reply, request: Request, number: int) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._send_event(_chunk(request, number, {"role": "assistant", "content": ""}))
        texts = _split(reply.text, reply.chunks) if reply.text or not reply.tool_calls else []
        deltas: list[dict[str, Any]] = [{"content": piece} for piece in texts]
        for place, call in enumerate(reply.tool_calls):
            opening = {"index": place, "type": "function", "function": {"name": call.name, "arguments": ""}}
            if call.id:
                opening["id"] = call.id
            deltas.append({"tool_calls": [opening]})
            for piece in _split(call.arguments, reply.chunks) if call.arguments else []:
                deltas.append({"tool_calls": [{"index": place, "function": {"arguments": piece}}]})
        for index, piece in enumerate(deltas):
            if reply.drop_after is not None and index >= reply.drop_after:
                self.close_connection = True
                return
            if reply.error_after is not None and index == reply.error_after:
                self._send_event({"error": {"message": "scripted error mid-stream", "type": "server_error"}})
                self._send_chunk(b"")
                return
            if index == reply.hold_after:
                owner._closing.wait()
                self.close_connection = True
                return
            if index and not owner._wait(reply.interval):
                self.close_connection = True
                return
            self._send_event(_chunk(request, number, piece))
        self._send_event(_chunk(request, number, {}, finish_reason=_finish(reply)))
        self._send_chunk(b"data: [DONE]\n\n")
        self._send_chunk(b"")

    def _send_anthropic_stream(self, reply: Reply, number: int) -> None:
        """A reply as the Anthropic Messages API streams one: a text block's deltas, then each call's
        ``tool_use`` block and its input's JSON in pieces, the stop reason and ``message_stop``."""
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        start = {"id": f"msg_{number}", "type": "message", "role": "assistant", "content": [], "stop_reason": None}
        self._send_named("message_start", {"type": "message_start", "message": start})
        pieces: list[tuple[str, dict[str, Any]]] = []
        block = 0
        if reply.text:
            opening = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            self._send_named("content_block_start", opening)
            for piece in _split(reply.text, reply.chunks):
                delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
                pieces.append(("content_block_delta", delta))
            pieces.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
            block = 1
        for place, call in enumerate(reply.tool_calls, block):
            used = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            pieces.append(
                ("content_block_start", {"type": "content_block_start", "index": place, "content_block": used})
            )
            for piece in _split(call.arguments, reply.chunks) if call.arguments else []:
                delta = {"type": "input_json_delta", "partial_json": piece}
                pieces.append(
                    ("content_block_delta", {"type": "content_block_delta", "index": place, "delta": delta})
                )
            pieces.append(("content_block_stop", {"type": "content_block_stop", "index": place}))
        for index, (name, data) in enumerate(pieces):
            if reply.drop_after is not None and index >= reply.drop_after:
                self.close_connection = True
                return
            if reply.error_after is not None and index == reply.error_after:
                self._send_named(
                    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "scripted"}}
                )
                self._send_chunk(b"")
                return
            if index and not owner._wait(reply.interval):
                self.close_connection = True
                return
            self._send_named(name, data)
        stop = _anthropic_stop(reply)
        self._send_named("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}})
        self._send_named("message_stop", {"type": "message_stop"})
        self._send_chunk(b"")

    def _send_responses_stream(self, reply: Reply, number: int) -> None:
        """A reply as the Responses API streams one: the message item's text deltas, then each call's
        ``function_call`` item and its arguments in pieces, then the final event with the whole response."""
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._send_named("response.created", {"type": "response.created", "response": {"id": f"resp_{number}"}})
        pieces: list[dict[str, Any]] = []
        if reply.text:
            message = {"type": "message", "id": f"msg_{number}", "role": "assistant", "content": []}
            pieces.append({"type": "response.output_item.added", "output_index": 0, "item": message})
            for piece in _split(reply.text, reply.chunks):
                pieces.append({"type": "response.output_text.delta", "item_id": f"msg_{number}", "delta": piece})
        for place, call in enumerate(reply.tool_calls):
            item = {"type": "function_call", "id": f"fc_{place}", "call_id": call.id, "name": call.name}
            pieces.append({"type": "response.output_item.added", "item": {**item, "arguments": ""}})
            for piece in _split(call.arguments, reply.chunks) if call.arguments else []:
                pieces.append(
                    {"type": "response.function_call_arguments.delta", "item_id": f"fc_{place}", "delta": piece}
                )
            pieces.append({"type": "response.output_item.done", "item": {**item, "arguments": call.arguments}})
        for index, data in enumerate(pieces):
            if reply.drop_after is not None and index >= reply.drop_after:
                self.close_connection = True
                return
            if reply.error_after is not None and index == reply.error_after:
                self._send_named("error", {"type": "error", "code": "server_error", "message": "scripted"})
                self._send_chunk(b"")
                return
            if index and not owner._wait(reply.interval):
                self.close_connection = True
                return
            self._send_named(data["type"], data)
        whole = _response(reply, number)
        final = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
        self._send_named(final, {"type": final, "response": whole})
        self._send_chunk(b"")

    def _send_named(self, name: str, data: Any) -> None:
        self._send_chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

    def _send_event(self, data: Any) -> None:
        self._send_chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

    def _send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _split(text: str, count: int) -> list[str]:
    """``text`` in ``count`` pieces of near-equal length (fewer when the text is shorter; never none)."""
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "rate_limit_error" if status == 429 else "api_error")
    return {"error": {"message": message, "type": kind, "code": None}}


def _anthropic_stop(reply: Reply) -> str:
    if reply.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if reply.tool_calls else "end_turn"


def _anthropic_message(reply: Reply, number: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for call in reply.tool_calls:
        try:
            given: Any = json.loads(call.arguments)
        except ValueError:
            given = call.arguments
        content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": given})
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": _anthropic_stop(reply),
    }


def _response(reply: Reply, number: int) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.text:
        text = {"type": "output_text", "text": reply.text, "annotations": []}
        output.append({"type": "message", "id": f"msg_{number}", "role": "assistant", "content": [text]})
    for place, call in enumerate(reply.tool_calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{place}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
    response: dict[str, Any] = {
        "id": f"resp_{number}",
        "object": "response",
        "status": "completed",
        "output": output,
    }
    if reply.finish_reason == "length":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    return response


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls and reply.finish_reason == "stop" else reply.finish_reason


def _completion(reply: Reply, request: Request, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["content"] = reply.text or None
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": _model(request),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
    }


def _chunk(
    request: Request, number: int, delta: dict[str, Any], finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": _model(request),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def _model(request: Request) -> Any:
    return request.body.get("model") if isinstance(request.body, dict) else None
