"""An agent that talks to any OpenAI-compatible chat-completions endpoint over HTTP.

:class:`ChatAgent` keeps its conversation's chat history (the system prompt, then the messages its codec wrote:
user and assistant messages, and with native tool calls the calls and their ``tool`` results) and POSTs it to
``{base_url}/chat/completions`` on every turn, plainly (:meth:`ChatAgent.send`) or streamed as server-sent events
(:meth:`ChatAgent.stream`). Its codec (:mod:`dial_runtime.llm.codecs`) says how the runtime's DIAL is spoken to
the model and how the model's answer is read back as DIAL. A turn joins the history once its answer is complete,
or, for a stream, once the caller has seen part of it; a send that fails or is cancelled before any answer leaves
nothing half-said behind, so the conversation can resend what it still owes.

Transient failures (connection errors, timeouts, HTTP 408, 409, 429 and 5xx) are retried up to ``max_retries``
times under the runtime's one retry policy (stamina's loop; see :mod:`dial_runtime._retry`), waiting as the
server's ``Retry-After`` (or ``retry-after-ms``) asks, else ``min(max_backoff, backoff * 2**(retry - 1))``
seconds and a random part of up to ``backoff``. The caller's deadline (the conversation's ``timeout``, or any
cancel scope) cuts a wait short; each retry is logged at INFO level on the ``dial_runtime.agents`` logger. A
streamed answer is never retried once its first content has arrived: the caller has already seen it. Every other
failure raises :class:`AgentError` at once, with the server's own message and the HTTP status.

The API key is sent in the ``Authorization`` header only: it is kept out of reprs, log records and exception
messages, and removed from any server message that quotes it.

Generation settings (``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``) go into every request body
when given; ``extra_body`` adds server-specific fields (vLLM's ``top_k``, llama.cpp's ``cache_prompt``, ...) after
them. A ``grammar`` (GBNF text, or a :class:`~dial_runtime.agents.grammar.Grammar` from
:func:`~dial_runtime.agents.grammar.domain_grammar`) constrains the replies: it is sent as llama.cpp's
``grammar`` field, or as vLLM's ``structured_outputs: {"grammar": ...}`` when ``server="vllm"`` (vLLM before
0.12 named it ``guided_grammar``: pass ``extra_body={"guided_grammar": ...}`` there instead).

A message may carry an id (``send(message, message_id=...)``): it is sent as the ``Idempotency-Key`` header, so a
server or proxy that deduplicates can tell a message resent after a crash from a new one.

The wire is spoken with httpx rather than the ``openai`` SDK: the requests are a handful of JSON fields, every
transient failure goes through the package's one retry policy (the SDK's own retries would be a second), a
stream must close at once when a deadline cuts it, on trio as on asyncio, and the agent must not bring a
dependency into a package whose core needs none. The tests check the messages the codecs write against a real
server through the official ``openai`` client.

The stream's events are read here, a dozen lines over httpx's lines, rather than with httpx-sse: a reply left
before its end (a deadline, a caller that stops reading) must bring httpx's nested generators to their end at once,
which :func:`_lines` does and httpx-sse's ``aiter_sse`` does not (it leaves them to the garbage collector, which
trio reports as a ``ResourceWarning``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio
import httpx
import msgspec

from .._retry import RetryPolicy, Tries, parse_retry_after
from ..agents.prompt import codec_prompt
from ..errors import AgentError, TokenLimitReached
from ..language.outcomes import compact_json
from ..runtime.events import LogEntry
from ..runtime.records import AgentReply, ProviderMessage
from ..views.agent import exchanges
from .codecs import Codec, DialCodec, codec_for
from .grammar import Grammar, domain_grammar

__all__ = [
    "SERVERS",
    "TRANSIENT_STATUSES",
    "AgentError",
    "ChatAgent",
    "ChatMessage",
    "GenerationSettings",
    "parse_retry_after",
]

logger = logging.getLogger("dial_runtime.agents")

#: HTTP statuses worth another try besides every 5xx: request timeout, conflict, too many requests.
TRANSIENT_STATUSES = frozenset({408, 409, 429})

# httpx errors that say the request may succeed when tried again; every other httpx error is final.
_TRANSIENT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

#: The server kinds a ChatAgent knows; the kind decides how a grammar is sent.
SERVERS = ("openai", "llamacpp", "vllm", "ollama")


_REDACTED = "[redacted]"
# At most this much of a server's error body is quoted in an AgentError.
_QUOTE_LIMIT = 500


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of a chat history: ``role`` is ``system``, ``user``, ``assistant`` or ``tool``; ``content`` its
    text, or its content blocks (the Anthropic Messages API's); an assistant's ``tool_calls`` (in the API's form)
    and a tool message's ``tool_call_id`` when a codec speaks in OpenAI's tool calls."""

    role: str
    content: str | list[dict[str, Any]] | None
    tool_calls: tuple[dict[str, Any], ...] = ()
    tool_call_id: str | None = None

    def wire(self) -> dict[str, Any]:
        """The message as the API takes it (JSON data: the calls a list)."""
        wire: dict[str, Any] = msgspec.to_builtins(self)
        if self.tool_calls:
            wire["tool_calls"] = list(self.tool_calls)
        return wire


def _message(data: Mapping[str, Any]) -> ChatMessage:
    """A codec's message (the API's form) as a :class:`ChatMessage`."""
    calls = data.get("tool_calls")
    return ChatMessage(
        role=str(data.get("role")),
        content=data.get("content"),
        tool_calls=tuple(calls) if isinstance(calls, (list, tuple)) else (),
        tool_call_id=data.get("tool_call_id"),
    )


def _stops(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    stops = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(stop, str) and stop for stop in stops):
        raise ValueError(f"ChatAgent: stop must be a non-empty string or a list of them, got {value!r}")
    return stops


class GenerationSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The sampling settings of every request; ``None`` leaves a setting to the server's default.

    ``stop`` is a string or a list of strings at which the server stops generating (kept as a tuple).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "stop", _stops(self.stop))
        if self.max_tokens is not None and not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise ValueError(f"ChatAgent: max_tokens must be a whole number of 1 or more, got {self.max_tokens!r}")
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise ValueError(f"ChatAgent: {name} must be a number of 0 or more, got {value!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"ChatAgent: seed must be a whole number, got {self.seed!r}")

    def body(self) -> dict[str, Any]:
        """The settings that are set, as request-body fields."""
        fields = {name: value for name, value in msgspec.structs.asdict(self).items() if value is not None}
        if "stop" in fields:
            fields["stop"] = list(fields["stop"])
        return fields


class _Transient(Exception):
    """A transient failure of one attempt, for the retry policy: why, the HTTP status if any, and the wait the
    server asked for."""

    def __init__(
        self,
        reason: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason, self.status, self.retry_after, self.cause = reason, status, retry_after, cause


def _is_transient(error: BaseException) -> bool:
    return isinstance(error, _Transient)


def _asked_wait(error: BaseException) -> float | None:
    return error.retry_after if isinstance(error, _Transient) else None


def _server_message(response: httpx.Response) -> str:
    """What the server said went wrong: the JSON ``error.message`` (or ``error``, ``message``, ``detail``), else
    the start of the body, else the reason phrase."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])
        for candidate in (error, data.get("message"), data.get("detail")):
            if isinstance(candidate, str) and candidate:
                return candidate
    text = response.text.strip()
    if text:
        return text[:_QUOTE_LIMIT]
    return response.reason_phrase or "no message"


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default TLS context, made once: loading the CA bundle takes tens of milliseconds per client."""
    return httpx.create_ssl_context()


@contextlib.asynccontextmanager
async def _lines(response: httpx.Response) -> AsyncIterator[AsyncIterator[str]]:
    """``response.aiter_lines()``, brought to its end on exit however the reading stopped.

    httpx reads through nested async generators and does not close the inner ones, so leaving the lines early would
    leave them to the garbage collector (which trio reports as a ResourceWarning). After a finished stream the rest
    of the body (normally nothing) is read, which keeps the connection reusable; after an early exit the response
    is closed first, so the reads fail or run out at once. That cleanup is shielded from cancellation: it must
    finish, and it waits on nothing remote.
    """
    lines = response.aiter_lines()
    try:
        yield lines
    except BaseException:
        with anyio.CancelScope(shield=True):
            await response.aclose()
            with contextlib.suppress(Exception):
                async for _ in lines:
                    pass
        raise
    with contextlib.suppress(httpx.HTTPError):
        async for _ in lines:
            pass


#: What each kind of transport failure means to a person, in the order to look them up (a subclass first).
_TRANSPORT_WORDS: tuple[tuple[type[httpx.HTTPError], str], ...] = (
    (httpx.ConnectTimeout, "connecting timed out"),
    (httpx.ConnectError, "could not connect"),
    (httpx.ReadTimeout, "no answer in time"),
    (httpx.TimeoutException, "timed out"),
    (httpx.RemoteProtocolError, "the server broke off the answer"),
    (httpx.NetworkError, "the network failed"),
)


def _describe(error: BaseException) -> str:
    """A transport failure in words a person reads (``could not connect: [Errno 111] Connection refused``)."""
    text = str(error).rstrip(".")
    kind = next((words for cls, words in _TRANSPORT_WORDS if isinstance(error, cls)), type(error).__name__)
    return f"{kind}: {text}" if text else kind


def history_from_log(entries: Iterable[LogEntry], codec: Codec | None = None) -> list[ChatMessage]:
    """The chat history a conversation's log implies (what the agent saw, :mod:`dial_runtime.views.agent`): each
    message sent that got a reply, and that reply, as ``codec`` (the DIAL codec by default) spoke them: a reply
    the same codec read from the model's own message is that message again, any other reply (a conversation held
    with another codec, or another agent) what the model would have written for it (``codec.spoken``).

    A message whose streamed reply had begun when the log stops, or stopped before the reply's end (a process
    that died while the person decided on an element the stream had already delivered), was delivered: it is
    kept, with the reply as far as the log has it (its ``reply-progress`` texts), or alone when the log has none.
    A message that got no reply at all is not kept.
    """
    speaking = DialCodec() if codec is None else codec
    history: list[dict[str, Any]] = []
    for exchange in exchanges(entry.event for entry in entries):
        if not exchange.delivered:
            continue
        history += speaking.incoming(exchange.message, history)
        answer = exchange.so_far if exchange.reply is None else exchange.reply
        provider = exchange.provider
        if provider is not None and provider.api == speaking.api and provider.codec in ("", speaking.name):
            history.append(speaking.read(provider.message, history).message)
        elif answer or exchange.reply is not None:
            history.append(speaking.spoken(answer, exchange.called))
    return [_message(message) for message in history]


class ChatAgent:
    """An agent behind an OpenAI-compatible ``/chat/completions`` endpoint, keeping its conversation's history.

    ``timeout`` bounds each HTTP request (seconds, or an ``httpx.Timeout``); ``None`` sets no bound of its own,
    leaving the conversation's deadline to bound the whole send, retries included. With ``client`` the requests
    go through that ``httpx.AsyncClient`` (its own timeout applies unless ``timeout`` is given) and
    :meth:`aclose` leaves it open; otherwise the agent owns a client and :meth:`aclose` (or ``async with``)
    closes it. ``extra_headers`` go with every request. One send or stream at a time: each continues the history
    the previous one left. ``history`` starts the agent where a stored conversation left off
    (:func:`history_from_log`).

    ``max_tokens``, ``temperature``, ``top_p``, ``seed`` and ``stop`` (or ``settings``, a
    :class:`GenerationSettings`, instead) go with every request; ``extra_body`` holds further fields for the
    server (it may not set ``model``, ``messages`` or ``stream``). ``grammar`` constrains every reply (see the
    module docstring); ``server`` (one of :data:`SERVERS`) says how to send it.
    """

    #: The API, as the log names the model's own messages (:class:`~dial_runtime.ports.ProviderMessage`).
    api = "openai-chat"
    #: Where the API answers, after the base URL.
    path = "/chat/completions"
    #: Body fields the agent writes itself, which ``extra_body`` may not replace.
    own_fields = frozenset({"model", "messages", "stream"})

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        system_prompt: str = "",
        client: httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        extra_headers: Mapping[str, str] | None = None,
        history: Iterable[ChatMessage] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        settings: GenerationSettings | None = None,
        extra_body: Mapping[str, Any] | None = None,
        grammar: str | Grammar | None = None,
        server: str = "openai",
        codec: Codec | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"ChatAgent: max_retries must be 0 or more, got {max_retries}")
        if not (backoff >= 0 and max_backoff >= 0):
            raise ValueError(f"ChatAgent: backoff and max_backoff must be 0 or more, got {backoff}, {max_backoff}")
        given = (max_tokens, temperature, top_p, seed, stop)
        if settings is None:
            settings = GenerationSettings(
                max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, stop=_stops(stop)
            )
        elif any(value is not None for value in given):
            raise TypeError("ChatAgent: pass settings or the separate generation settings, not both")
        if server not in SERVERS:
            raise ValueError(f"ChatAgent: server must be one of {', '.join(SERVERS)}, got {server!r}")
        clashing = sorted(self.own_fields & set(extra_body or {}))
        if clashing:
            raise ValueError(f"ChatAgent: extra_body may not set {', '.join(clashing)}; the agent writes them")
        self.codec: Codec = DialCodec() if codec is None else codec
        if grammar is not None and self.codec.name != "dial":
            raise ValueError(f"ChatAgent: a grammar constrains DIAL replies; the {self.codec.name} codec has none")
        self.settings = settings
        self.server = server
        self.grammar = grammar.gbnf if isinstance(grammar, Grammar) else grammar
        self._extra_body = dict(extra_body or {})
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.system_prompt = system_prompt
        #: How transient failures are retried: ``max_retries`` retries after the first try.
        self.retry = RetryPolicy(attempts=max_retries + 1, backoff=backoff, max_backoff=max_backoff)
        self._url = f"{self.base_url}{self.path}"
        #: Why the tries of the message being sent have failed so far (the last one's reason and how many there
        #: were), while it is retried; ``None`` until one fails (each message starts afresh). What a conversation
        #: whose deadline passed before any answer tells the person, instead of only that the agent was slow.
        self.last_failure: str | None = None
        self._api_key = api_key or None
        self._headers = {"Content-Type": "application/json", **(extra_headers or {})}
        if self._api_key:
            self._headers.update(self._authorization(self._api_key))
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=timeout, verify=_ssl_context())
        self._timeout: Any = timeout if timeout is not None or client is None else httpx.USE_CLIENT_DEFAULT
        self._history: list[ChatMessage] = list(history)
        # The codec's fields (the tools, a schema) are the same in every request: encoded once, sent as they are.
        self._codec_fields = {
            name: msgspec.Raw(msgspec.json.encode(value)) for name, value in self.codec.request_fields().items()
        }

    #: The codec :meth:`for_domain` speaks unless told.
    default_codec = "dial"

    @classmethod
    def for_domain(
        cls,
        base_url: str,
        model: str,
        domain: Any,
        *,
        constrain: bool = False,
        codec: str | None = None,
        strict: bool = False,
        **options: Any,
    ) -> ChatAgent:
        """An agent for ``domain`` speaking ``codec`` (one of :data:`~dial_runtime.llm.codecs.CODECS`; the
        class's :attr:`default_codec` unless given) with the system prompt that codec needs
        (:func:`~dial_runtime.agents.prompt.codec_prompt`) unless ``system_prompt`` is given.

        With ``"dial"`` and ``constrain`` it gets the grammar
        :func:`~dial_runtime.llm.grammar.domain_grammar` writes for the domain (for llama.cpp or vLLM); with
        ``"tools"`` each action is a tool (``strict`` marks their schemas strict)."""
        name = cls.default_codec if codec is None else codec
        if constrain and name != "dial":
            raise ValueError(f"{cls.__name__}: constrain writes a DIAL grammar; the {name} codec has none")
        options["codec"] = codec_for(name, domain, strict=strict, api=cls.api)
        options.setdefault("system_prompt", codec_prompt(name, domain))
        if constrain:
            options["grammar"] = domain_grammar(domain)
        return cls(base_url, model, **options)

    def __repr__(self) -> str:
        key = "'<hidden>'" if self._api_key else "None"
        return f"ChatAgent(base_url={self.base_url!r}, model={self.model!r}, api_key={key})"

    @property
    def history(self) -> tuple[ChatMessage, ...]:
        """The conversation so far, without the system prompt: user and assistant messages, alternating."""
        return tuple(self._history)

    async def send(self, message: str, *, message_id: str | None = None) -> str | AgentReply:
        """Send ``message`` with the history and return the assistant's reply, retrying transient failures: its
        text, or with a codec other than DIAL the reply as DIAL with the model's message (:class:`AgentReply`).

        A reply the model stopped at its token limit is not whole: :class:`TokenLimitReached`, and the history
        stays as it was. ``message_id`` goes as the ``Idempotency-Key`` header (every retry of the message carries
        the same one).
        """
        history = self._wire_history()
        incoming = self.codec.incoming(message, history)
        body = self._body(history + incoming, stream=False)
        headers = self._headers_for(message_id)
        self.last_failure = None
        tries = self._tries()
        try:
            async for attempt in tries:
                with attempt:
                    answer = await self._post(body, headers)
                    read = self.codec.read(answer, history + incoming)
                    self._remember(incoming, read.message)
                    if self.codec.name == "dial":
                        return read.dial
                    provider = ProviderMessage(api=self.api, message=answer, codec=self.codec.name)
                    return AgentReply(text=read.dial, provider=provider)
        except _Transient as failure:
            raise self._gave_up(tries, failure) from failure.cause
        raise AssertionError("unreachable: the tries end by returning or raising")

    async def stream(
        self, message: str, *, message_id: str | None = None
    ) -> AsyncGenerator[str | ProviderMessage, None]:
        """Send ``message`` with ``"stream": true`` and yield the reply's text as it arrives.

        The reply joins the history when the stream completes. Once some text has arrived, what arrived joins it
        however the stream ends (completed, broken off, or left early: close it with ``contextlib.aclosing``),
        since the caller has seen that much; a stream that ends before any text leaves the history as it was.
        Transient failures are retried until the first piece of text arrives, never after. ``message_id`` is sent
        as for :meth:`send`.

        With a codec other than DIAL the text is the reply as DIAL: the model's words as they arrive, each tool
        call once the stream is complete (a stream cut in the middle of a call proposes nothing), then the
        model's message (:class:`ProviderMessage`). A stream cut at the token limit gives the words the codec held
        back (text that might have been calls) before :class:`TokenLimitReached`, so it is a cut reply whatever
        the codec.
        """
        history = self._wire_history()
        incoming = self.codec.incoming(message, history)
        body = self._body(history + incoming, stream=True)
        headers = self._headers_for(message_id)
        live = self.codec.live()
        assembled = _Assembled()
        pieces: list[str] = []
        completed = False
        self.last_failure = None
        tries = self._tries()
        try:
            async for attempt in tries:
                with attempt:
                    try:
                        async with self._client.stream(
                            "POST", self._url, content=body, headers=headers, timeout=self._timeout
                        ) as response:
                            await self._check_status(response)
                            async with contextlib.aclosing(self._stream_deltas(response)) as deltas:
                                try:
                                    async for delta in deltas:
                                        piece = live.feed(assembled.add(delta))
                                        if piece:
                                            pieces.append(piece)
                                            yield piece
                                except TokenLimitReached:
                                    held = live.cut(assembled.content())
                                    if held:
                                        pieces.append(held)
                                        yield held
                                    raise
                    except httpx.HTTPError as error:
                        if pieces:
                            reason = f"{self._url}: the streamed answer broke off after it had started"
                            reason = self._redact(f"{reason}: {_describe(error)}")
                            raise AgentError(reason, status=response.status_code) from error
                        raise self._transport_failure(error) from error
                    completed = True
                    break
        except _Transient as failure:
            raise self._gave_up(tries, failure) from failure.cause
        finally:
            if not completed and pieces:  # the caller has seen this much of the model's words
                self._remember(incoming, {"role": "assistant", "content": assembled.content()})
        answer = self._streamed_message(assembled)
        read = self.codec.read(answer, history + incoming)
        self._remember(incoming, read.message)
        rest = live.finish(read.dial)
        if rest:
            yield rest
        if self.codec.name != "dial":
            yield ProviderMessage(api=self.api, message=answer, codec=self.codec.name)

    async def aclose(self) -> None:
        """Close the HTTP client, if the agent made it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> ChatAgent:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------------------ internals

    def _authorization(self, key: str) -> dict[str, str]:
        """The headers that carry the API key."""
        return {"Authorization": f"Bearer {key}"}

    def _streamed_message(self, assembled: _Assembled) -> dict[str, Any]:
        """The whole message a stream put together, in the API's form."""
        return assembled.message()

    def _wire_history(self) -> list[dict[str, Any]]:
        return [entry.wire() for entry in self._history]

    def _body(self, messages: list[dict[str, Any]], *, stream: bool) -> bytes:
        """The request's JSON body, encoded once for every try (msgspec: the tools or schema a codec sends with
        every request are most of it, and httpx's ``json=`` would encode them again with the slower ``json``):
        the API's own start (:meth:`_start`), the codec's fields, the generation settings as the API names them
        (:meth:`_settings`), the grammar, then ``extra_body``."""
        body = self._start(messages)
        if stream:
            body["stream"] = True
        body.update(self._codec_fields)
        body.update(self._settings())
        if self.grammar is not None:
            if self.server == "vllm":
                body["structured_outputs"] = {"grammar": self.grammar}
            else:
                body["grammar"] = self.grammar
        body.update(self._extra_body)
        return msgspec.json.encode(body)

    def _start(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The model, the system prompt and ``messages``, as the API takes them."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return {"model": self.model, "messages": system + messages}

    def _settings(self) -> dict[str, Any]:
        """The generation settings, as the API names them."""
        return self.settings.body()

    def _headers_for(self, message_id: str | None) -> dict[str, str]:
        if message_id is None:
            return self._headers
        return {**self._headers, "Idempotency-Key": message_id}

    def _remember(self, incoming: list[dict[str, Any]], reply: Mapping[str, Any]) -> None:
        self._history += [_message(message) for message in (*incoming, reply)]

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, _REDACTED) if self._api_key else text

    async def _post(self, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        """One plain attempt: the assistant's message; :class:`_Transient` to retry, or ``AgentError``."""
        try:
            response = await self._client.post(self._url, content=body, headers=headers, timeout=self._timeout)
        except httpx.HTTPError as error:
            raise self._transport_failure(error) from error
        await self._check_status(response)
        return self._completion_message(response)

    def _transport_failure(self, error: httpx.HTTPError) -> _Transient:
        """A transient failure to retry, or ``AgentError`` at once for an error another try would not fix."""
        if isinstance(error, _TRANSIENT_ERRORS):
            return _Transient(self._redact(_describe(error)), cause=error)
        raise AgentError(self._redact(f"{self._url}: {_describe(error)}")) from error

    async def _check_status(self, response: httpx.Response) -> None:
        """Nothing for a 2xx response; :class:`_Transient` to retry, or ``AgentError`` at once."""
        if response.is_success:
            return
        await response.aread()
        status = response.status_code
        message = self._redact(_server_message(response))
        if status in TRANSIENT_STATUSES or status >= 500:
            raise _Transient(
                f"HTTP {status}: {message}", status=status, retry_after=parse_retry_after(response.headers)
            )
        raise AgentError(f"{self._url} answered HTTP {status}: {message}", status=status)

    def _tries(self) -> Tries:
        return self.retry.tries(_is_transient, asked=_asked_wait, on_retry=self._retrying)

    def _retrying(self, tried: int, error: BaseException, wait: str) -> None:
        """Before a retry: what ``last_failure`` says meanwhile, and one log line."""
        reason = error.reason if isinstance(error, _Transient) else str(error)
        self.last_failure = reason if tried == 1 else f"{reason} (each of {tried} tries)"
        logger.info("%s: %s; retry %d of %d in %s", self._url, reason, tried, self.retry.attempts - 1, wait)

    def _gave_up(self, tries: Tries, failure: _Transient) -> AgentError:
        """The error of a message whose tries ran out."""
        made = tries.made
        self.last_failure = failure.reason if made == 1 else f"{failure.reason} (each of {made} tries)"
        attempts = "1 attempt" if made == 1 else f"{made} attempts"
        return AgentError(f"{self._url}: gave up after {attempts}: {failure.reason}", status=failure.status)

    def _completion_message(self, response: httpx.Response) -> dict[str, Any]:
        """A completion's ``choices[0].message``; :class:`TokenLimitReached` when the model stopped at its token
        limit (``finish_reason`` ``length``): the reply is not whole."""
        data = self._completion(response)
        message = self._part(data, "message", response.status_code)
        if _finish_reason(data) == "length":
            raise self._token_limit(response.status_code)
        return message

    def _completion(self, response: httpx.Response) -> Any:
        """A completion's JSON body, or ``AgentError``."""
        try:
            return msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            raise AgentError(
                self._redact(f"{self._url}: the response is not JSON: {response.text[:_QUOTE_LIMIT]!r}"),
                status=response.status_code,
            ) from None

    def _decoded(self, event: str, status: int) -> Any:
        """A streamed event's JSON, or ``AgentError`` quoting what was not JSON."""
        try:
            return msgspec.json.decode(event)
        except msgspec.DecodeError:
            reason = f"{self._url}: a streamed event is not JSON: {event[:_QUOTE_LIMIT]!r}"
            raise AgentError(self._redact(reason), status=status) from None

    def _token_limit(self, status: int) -> TokenLimitReached:
        """Why a reply is not whole: the model stopped at its token limit."""
        reason = f"{self._url}: the answer reached the token limit (finish_reason length)"
        return TokenLimitReached(reason, status=status)

    def _part(self, data: Any, key: str, status: int) -> dict[str, Any]:
        """``choices[0][key]`` of a completion (``message``) or of a stream chunk (``delta``).

        A chunk without one (usage, a finish reason alone) gives ``{}``; a completion whose message has no text
        (and, with a codec that reads tool calls, no tool calls either), or any payload with an ``error``, raises
        ``AgentError``.
        """
        error = data.get("error") if isinstance(data, Mapping) else None
        if error:
            message = error.get("message", error) if isinstance(error, Mapping) else error
            raise AgentError(self._redact(f"{self._url}: the server reported an error: {message}"), status=status)
        choices = data.get("choices") if isinstance(data, Mapping) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        part = first.get(key) if isinstance(first, Mapping) else None
        if not isinstance(part, dict):
            part = None
        if key == "delta":
            return part or {}
        if part is not None and (
            isinstance(part.get("content"), str) or (self.codec.name != "dial" and "tool_calls" in part)
        ):
            return part
        shown = json.dumps(data, ensure_ascii=False)[:_QUOTE_LIMIT]
        raise AgentError(self._redact(f"{self._url}: no choices[0].message.content in {shown}"), status=status)

    async def _stream_deltas(self, response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
        """The ``choices[0].delta`` of each event of a server-sent event stream, up to ``[DONE]``.

        A server that answers a streamed request with a plain JSON completion gives its message as one delta. A
        stream is whole when it says it ended (``[DONE]``, or a chunk's ``finish_reason``): one whose body ends
        without saying so (a server that died, a proxy that gave up) raises ``AgentError`` after its pieces, and
        one that ended at the token limit (``finish_reason`` ``length``, in the stream or the completion) raises
        :class:`TokenLimitReached` after them, so the conversation never takes either for a whole reply.
        """
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
            completion = self._completion(response)
            yield self._part(completion, "message", response.status_code)
            if _finish_reason(completion) == "length":
                raise self._token_limit(response.status_code)
            return
        finish_reason: str | None = None
        status = response.status_code
        async with _lines(response) as lines, contextlib.aclosing(_events(lines)) as events:
            async for event in events:
                if event == "[DONE]":
                    break
                chunk = self._decoded(event, status)
                delta = self._part(chunk, "delta", status)
                if delta:
                    yield delta
                finish_reason = _finish_reason(chunk) or finish_reason
            else:
                if finish_reason is None:
                    reason = f"{self._url}: the streamed answer ended without [DONE] or a finish_reason"
                    raise AgentError(reason, status=status)
        if finish_reason == "length":
            raise self._token_limit(status)


async def _events(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The data of each server-sent event of ``lines`` (its ``data:`` lines joined); other fields are skipped."""
    data: list[str] = []
    async for line in lines:
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value[1:] if value.startswith(" ") else value)
        elif data:
            yield "\n".join(data)
            data = []


def _finish_reason(chunk: Any) -> str | None:
    """``choices[0].finish_reason`` of a stream chunk or a completion, when it has one."""
    choices = chunk.get("choices") if isinstance(chunk, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    reason = first.get("finish_reason") if isinstance(first, Mapping) else None
    return reason if isinstance(reason, str) else None


class _Assembled:
    """A streamed assistant message put together from its deltas: the text, and each tool call by its index
    (its id and name from the first delta that has them, its arguments joined)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, delta: Mapping[str, Any]) -> str:
        """Take one delta; return the text it adds."""
        for fragment in delta.get("tool_calls") or ():
            if not isinstance(fragment, Mapping):
                continue
            index = fragment.get("index", len(self.calls))
            call = self.calls.setdefault(index, {"id": "", "type": "function", "name": "", "arguments": []})
            if fragment.get("id"):
                call["id"] = fragment["id"]
            function = fragment.get("function")
            if isinstance(function, Mapping):
                if function.get("name"):
                    call["name"] += function["name"]
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call["arguments"].append(arguments)
                elif arguments is not None:  # a server that sends the arguments whole, as an object
                    call["arguments"].append(compact_json(arguments))
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.pieces.append(content)
            return content
        return ""

    def content(self) -> str:
        return "".join(self.pieces)

    def message(self) -> dict[str, Any]:
        """The whole message, as a completion would give it."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content() or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.calls.items())
            ]
        return message
