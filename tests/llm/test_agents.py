"""Agents over HTTP: URIs, history, streaming, the retry policy, keys that never leak, and whole conversations
against a real loopback chat-completions server; and the recorded agent that replays a conversation's log.

The HTTP tests run on trio and asyncio with real clocks (the loopback server answers in real time, which a virtual
clock would jump past) and keep every real wait to a fraction of a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from dial_runtime import Conversation, policy_human, project, replay
from dial_runtime.agents import AgentError, RecordedAgent, system_prompt
from dial_runtime.errors import TokenLimitReached
from dial_runtime.language.outcomes import outcome_reply
from dial_runtime.llm.chat import ChatAgent, ChatMessage, GenerationSettings, history_from_log, parse_retry_after
from dial_runtime.llm.grammar import domain_grammar
from dial_runtime.llm.uri import agent_from_uri
from dial_runtime.runtime.events import (
    Event,
    LogEntry,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyStartedEvent,
    SentEvent,
    entry_to_dict,
)
from dial_runtime.stores import open_store
from dial_runtime.terminal.surface import PlainAgent
from dial_runtime.views.person import Notice

from ..crash_child import OK, FileNotes
from ..driver.test_durable import crash
from ..fakes import Agent, Notes, envelope, suggest
from ..openai_server import Drop, Error, OpenAIServer, Reply
from ..web_server import free_port

pytestmark = pytest.mark.anyio

KEY = "sk-test-SECRET-0123456789abcdef"
ADD_MILK = envelope(suggest("add-note", '{"text":"buy milk"}'), prose="Sure.")
THANKS = envelope('<dial-acknowledge of="sg-1">Added.</dial-acknowledge>')


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends with real clocks."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running
    assert not running.errors


def chat(server: OpenAIServer, **options: Any) -> ChatAgent:
    """An agent on the loopback server with tiny backoffs, so retries cost no real time."""
    options = {"backoff": 0.001, "max_backoff": 0.005, **options}
    return ChatAgent(server.base_url, "test-model", **options)


def completion(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


def mock_client(
    respond: Callable[[httpx.Request], httpx.Response], seen: list[httpx.Request]
) -> httpx.AsyncClient:
    """A client whose transport answers in-process, for what needs no socket: URIs and malformed bodies."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return respond(request)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def collect(agent: ChatAgent, message: str) -> list[str]:
    return [piece async for piece in agent.stream(message)]


# ---------------------------------------------------------------------------------------------- URIs

LOCAL = "http://localhost"
URIS = [
    # uri, environment, base URL, model, Authorization header
    ("openai:gpt-4o-mini", {"OPENAI_API_KEY": "sk-o"}, "https://api.openai.com/v1", "gpt-4o-mini", "Bearer sk-o"),
    ("ollama:llama3.1@localhost:11434", {"DIAL_AGENT_API_KEY": "k"}, f"{LOCAL}:11434/v1", "llama3.1", None),
    ("ollama:llama3.1", {}, f"{LOCAL}:11434/v1", "llama3.1", None),
    ("ollama:llama3.1:8b@gpu-box", {}, "http://gpu-box:11434/v1", "llama3.1:8b", None),
    ("ollama:qwen2.5@[::1]:11500", {}, "http://[::1]:11500/v1", "qwen2.5", None),
    ("vllm:org/Model-8B@gpu:8001", {"DIAL_AGENT_API_KEY": "k"}, "http://gpu:8001/v1", "org/Model-8B", "Bearer k"),
    ("vllm:m", {}, f"{LOCAL}:8000/v1", "m", None),
    ("llamacpp:qwen", {}, f"{LOCAL}:8080/v1", "qwen", None),
    ("llamacpp:qwen@box:9000", {}, "http://box:9000/v1", "qwen", None),
    ("http://host:8000/v1#model-name", {}, "http://host:8000/v1", "model-name", None),
    (
        "http://host:8000/v1#model-name",
        {"DIAL_AGENT_API_KEY": "k"},
        "http://host:8000/v1",
        "model-name",
        "Bearer k",
    ),
    ("https://example.test/api/v1/#org/model%201", {}, "https://example.test/api/v1", "org/model 1", None),
]


@pytest.mark.parametrize(("uri", "environment", "base_url", "model", "authorization"), URIS)
async def test_a_uri_names_the_endpoint_the_model_and_the_key(
    monkeypatch: pytest.MonkeyPatch,
    uri: str,
    environment: dict[str, str],
    base_url: str,
    model: str,
    authorization: str | None,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("DIAL_AGENT_API_KEY", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    seen: list[httpx.Request] = []
    async with mock_client(lambda request: httpx.Response(200, json=completion("hi")), seen) as client:
        agent = agent_from_uri(uri, system_prompt="Be brief.", client=client, max_retries=0)
        assert (agent.base_url, agent.model, agent.system_prompt) == (base_url, model, "Be brief.")
        assert await agent.send("hello") == "hi"
    (request,) = seen
    assert str(request.url) == f"{base_url}/chat/completions"
    assert json.loads(request.content)["model"] == model
    assert request.headers.get("authorization") == authorization


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("", "is not one of"),
        ("gpt-4o", "is not one of"),
        ("openai:", "write openai:MODEL"),
        ("openai:gpt@host", "write openai:MODEL"),
        ("ollama:", "write ollama:MODEL"),
        ("ollama:@localhost", "write ollama:MODEL"),
        ("ollama:m@host:port", "Port could not be cast"),
        ("ollama:m@host:99999", "out of range"),
        ("ollama:m@host/path", "is not HOST or HOST:PORT"),
        ("ollama:my model", "is not one of"),
        ("anthropic:", "write anthropic:MODEL"),
        ("anthropic:@localhost", "write anthropic:MODEL"),
        ("gemini:flash", "unknown scheme 'gemini'"),
        ("ftp://host/v1#m", "unknown scheme 'ftp'"),
        ("http://host:8000/v1", "names no model"),
        ("http://host:8000/v1#", "names no model"),
        ("http:///v1#m", "has no host"),
        ("http://user:secret@host/v1#m", "put no credentials in the URI"),
        (
            "http://host/v1?x=1#m",
            "unknown parameter 'x'; use max_tokens, seed, temperature, top_p, stop, codec, api or extra.NAME",
        ),
        ("llamacpp:m?temperature=warm", "temperature must be a number, got 'warm'"),
        ("llamacpp:m?max_tokens=2.5", "max_tokens must be a whole number, got '2.5'"),
        ("llamacpp:m?seed=1&seed=2", "seed is given twice"),
        ("llamacpp:m?extra.top_k=1&extra.top_k=2", "extra.top_k is given twice"),
        ("llamacpp:m?temperature=nan", "temperature must be a number of 0 or more"),
        ("llamacpp:m?max_tokens=0", "max_tokens must be a whole number of 1 or more"),
        ("vllm:m?extra.model=other", "extra_body may not set model"),
        ("ollama:m?Temperature=0", "unknown parameter 'Temperature'"),
        ("http://host:70000/v1#m", "out of range"),
    ],
)
def test_a_malformed_uri_is_refused_with_a_reason(uri: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        agent_from_uri(uri)
    assert "secret" not in str(caught.value)


# ---------------------------------------------------------------------------------------------- settings

#: URI query -> the fields it adds to every request body.
SETTINGS = [
    ("", {}),
    ("?temperature=0&seed=1&max_tokens=256", {"temperature": 0.0, "seed": 1, "max_tokens": 256}),
    ("?top_p=0.9&stop=%3C%2Fdial%3E&stop=END", {"top_p": 0.9, "stop": ["</dial>", "END"]}),
    (
        "?extra.top_k=40&extra.cache_prompt=true&extra.mirostat_tau=5.0&extra.note=plain%20text",
        {"top_k": 40, "cache_prompt": True, "mirostat_tau": 5.0, "note": "plain text"},
    ),
    ("?extra.options=%7B%22a%22%3A%5B1%2C2%5D%7D", {"options": {"a": [1, 2]}}),
]


@pytest.mark.parametrize("form", ["llamacpp", "http"])
@pytest.mark.parametrize(("query", "fields"), SETTINGS)
async def test_a_uris_query_sets_every_requests_generation_settings(
    server: OpenAIServer, form: str, query: str, fields: dict[str, Any]
) -> None:
    server.add("one", Reply("two", chunks=2))
    uri = f"llamacpp:m@127.0.0.1:{server.port}{query}" if form == "llamacpp" else f"{server.base_url}{query}#m"
    async with agent_from_uri(uri, max_retries=0) as agent:
        assert agent.base_url == server.base_url
        await agent.send("a")
        await collect(agent, "b")
    for request in server.requests:
        own = {"model", "messages", "stream"}
        assert {name: value for name, value in request.body.items() if name not in own} == fields
        assert request.body["model"] == "m"


async def test_keyword_settings_take_precedence_over_the_uri(server: OpenAIServer) -> None:
    server.add("one")
    uri = f"{server.base_url}?temperature=1&seed=1&extra.top_k=40&extra.min_p=0.1#m"
    async with agent_from_uri(uri, temperature=0.2, extra_body={"top_k": 5}) as agent:
        await agent.send("a")
    body = server.requests[0].body
    assert (body["temperature"], body["seed"], body["top_k"], body["min_p"]) == (0.2, 1, 5, 0.1)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"extra_body": {"messages": []}}, "extra_body may not set messages"),
        ({"extra_body": {"stream": False, "model": "x"}}, "extra_body may not set model, stream"),
        ({"temperature": -1}, "temperature must be a number of 0 or more"),
        ({"top_p": float("inf")}, "top_p must be a number of 0 or more"),
        ({"seed": 1.5}, "seed must be a whole number"),
        ({"max_tokens": 0}, "max_tokens must be a whole number of 1 or more"),
        ({"stop": ["ok", ""]}, "stop must be a non-empty string"),
        ({"server": "tgi"}, "server must be one of openai, llamacpp, vllm, ollama"),
    ],
)
def test_generation_settings_are_checked(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ChatAgent("http://test/v1", "m", **options)


def test_settings_come_whole_or_separately() -> None:
    with pytest.raises(TypeError, match="not both"):
        ChatAgent("http://test/v1", "m", settings=GenerationSettings(seed=1), temperature=0)
    assert ChatAgent("http://test/v1", "m", settings=GenerationSettings(stop="x")).settings.stop == ("x",)


GBNF = 'root ::= "<dial><dial-inform>hi</dial-inform></dial>"\n'


@pytest.mark.parametrize(
    ("uri", "field", "value"),
    [
        ("llamacpp:m@127.0.0.1:{port}", "grammar", GBNF),
        ("http://127.0.0.1:{port}/v1#m", "grammar", GBNF),
        ("vllm:m@127.0.0.1:{port}", "structured_outputs", {"grammar": GBNF}),
    ],
)
async def test_a_grammar_goes_in_the_field_the_server_reads(
    server: OpenAIServer, uri: str, field: str, value: Any
) -> None:
    server.add("one", Reply("two", chunks=2))
    async with agent_from_uri(uri.format(port=server.port), grammar=GBNF) as agent:
        await agent.send("a")
        await collect(agent, "b")
    assert [request.body[field] for request in server.requests] == [value, value]
    assert all({"grammar", "structured_outputs"} & set(request.body) == {field} for request in server.requests)


async def test_a_domain_agent_is_prompted_and_constrained_for_its_domain(server: OpenAIServer) -> None:
    server.add("one")
    domain = Notes()
    async with ChatAgent.for_domain(server.base_url, "m", domain, constrain=True, server="llamacpp") as agent:
        await agent.send("a")
    body = server.requests[0].body
    assert body["messages"][0] == {"role": "system", "content": system_prompt(domain)}
    assert body["grammar"] == domain_grammar(domain).gbnf
    async with ChatAgent.for_domain(server.base_url, "m", domain) as unconstrained:
        assert unconstrained.grammar is None


# ---------------------------------------------------------------------------------------------- message ids


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_a_message_id_goes_as_the_idempotency_key_of_every_try(server: OpenAIServer, streamed: bool) -> None:
    server.add(Error(503), Reply("one", chunks=2), Reply("two", chunks=2))
    async with chat(server) as agent:
        if streamed:
            assert "".join(await collect_with_id(agent, "a", "c-1/reply-1")) == "one"
            await collect(agent, "b")
        else:
            assert await agent.send("a", message_id="c-1/reply-1") == "one"
            await agent.send("b")
    keys = [request.headers.get("idempotency-key") for request in server.requests]
    assert keys == ["c-1/reply-1", "c-1/reply-1", None]


async def collect_with_id(agent: ChatAgent, message: str, message_id: str) -> list[str]:
    return [piece async for piece in agent.stream(message, message_id=message_id)]


def test_keys_come_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="needs the OPENAI_API_KEY environment variable"):
        agent_from_uri("openai:gpt-4o-mini")
    with pytest.raises(TypeError, match="from the environment"):
        agent_from_uri("ollama:m", api_key="sk-passed")


# ---------------------------------------------------------------------------------------------- conversation state


def logged(*events: Event) -> list[LogEntry]:
    return [LogEntry(seq=seq, time=0.0, event=event) for seq, event in enumerate(events, start=1)]


#: "q" went to the agent, and its reply began to stream.
STREAMING: list[Event] = [SentEvent(turn=1, message="q"), ReplyStartedEvent(turn=1)]


@pytest.mark.parametrize(
    ("events", "history"),
    [
        pytest.param(
            [SentEvent(turn=1, message="q"), ReplyEvent(turn=1, text="a")],
            [ChatMessage(role="user", content="q"), ChatMessage(role="assistant", content="a")],
            id="answered",
        ),
        pytest.param(
            [*STREAMING, ReplyEvent(turn=1, text="a")],
            [ChatMessage(role="user", content="q"), ChatMessage(role="assistant", content="a")],
            id="streamed",
        ),
        pytest.param([SentEvent(turn=1, message="q")], [], id="never-answered"),
        pytest.param(
            [SentEvent(turn=1, message="q"), SentEvent(turn=1, message="q again"), ReplyEvent(turn=1, text="a")],
            [ChatMessage(role="user", content="q again"), ChatMessage(role="assistant", content="a")],
            id="resent-after-a-crash",
        ),
        pytest.param(
            STREAMING,
            [ChatMessage(role="user", content="q")],
            id="died-while-streaming",
        ),
        pytest.param(
            [*STREAMING, ReplyProgressEvent(turn=1, text="<dial>"), ReplyProgressEvent(turn=1, text="<dial-ask>")],
            [ChatMessage(role="user", content="q"), ChatMessage(role="assistant", content="<dial><dial-ask>")],
            id="died-while-the-person-decided",
        ),
        pytest.param(
            [*STREAMING, ReplyProgressEvent(turn=1, text="<dial>"), ReplyEvent(turn=1, text="<dial></dial>")],
            [ChatMessage(role="user", content="q"), ChatMessage(role="assistant", content="<dial></dial>")],
            id="the-whole-reply-wins",
        ),
        pytest.param(
            [*STREAMING, SentEvent(turn=1, message="outcome"), ReplyEvent(turn=1, text="ok")],
            [
                ChatMessage(role="user", content="q"),
                ChatMessage(role="user", content="outcome"),
                ChatMessage(role="assistant", content="ok"),
            ],
            id="taken-up-after-dying-while-streaming",
        ),
    ],
)
def test_the_history_a_log_implies(events: list[Event], history: list[ChatMessage]) -> None:
    """Every message the agent began to answer is in the history, even when the log lost the reply's end."""
    assert history_from_log(logged(*events)) == history


async def test_the_agent_keeps_its_conversations_history(server: OpenAIServer) -> None:
    server.add("one", "two")
    async with chat(server, system_prompt="You are terse.", extra_headers={"X-Title": "tests"}) as agent:
        assert await agent.send("a") == "one"
        assert await agent.send("b") == "two"
        assert agent.history == (
            ChatMessage(role="user", content="a"),
            ChatMessage(role="assistant", content="one"),
            ChatMessage(role="user", content="b"),
            ChatMessage(role="assistant", content="two"),
        )
    first, second = server.requests
    system = {"role": "system", "content": "You are terse."}
    assert first.messages == [system, {"role": "user", "content": "a"}]
    assert second.messages == [
        system,
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "b"},
    ]
    assert second.body["model"] == "test-model"
    assert "stream" not in second.body
    assert second.headers["x-title"] == "tests"
    assert "authorization" not in second.headers


async def test_without_a_system_prompt_the_history_starts_with_the_user(server: OpenAIServer) -> None:
    server.add("one")
    async with chat(server) as agent:
        await agent.send("a")
    assert server.requests[0].messages == [{"role": "user", "content": "a"}]


TRICKY = 'Héllo <dial>\n  <dial-inform>wörld &amp; "quotes"</dial-inform>\n</dial>\n\ndata: [DONE] 🎉'


async def test_streamed_and_plain_replies_give_the_same_text(server: OpenAIServer) -> None:
    server.add(Reply(TRICKY), Reply(TRICKY, chunks=7, interval=0.002))
    async with chat(server) as agent:
        plain = await agent.send("q")
        pieces = await collect(agent, "q")
        assert plain == "".join(pieces) == TRICKY
        assert len(pieces) == 7
        assert agent.history[-1] == ChatMessage(role="assistant", content=TRICKY)
        assert len(agent.history) == 4
    assert [request.stream for request in server.requests] == [False, True]
    assert server.requests[1].messages[-2:] == [
        {"role": "assistant", "content": TRICKY},
        {"role": "user", "content": "q"},
    ]


async def test_a_stream_left_early_keeps_what_the_caller_saw(server: OpenAIServer) -> None:
    server.add(Reply("abcdefghi", chunks=3), "after")
    async with chat(server) as agent:
        async with contextlib.aclosing(agent.stream("q")) as pieces:
            async for piece in pieces:
                assert piece == "abc"
                break
        assert agent.history == (
            ChatMessage(role="user", content="q"),
            ChatMessage(role="assistant", content="abc"),
        )
        assert await agent.send("again") == "after"
    assert server.requests[1].messages[-3:] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "abc"},
        {"role": "user", "content": "again"},
    ]


async def test_a_stream_cancelled_before_any_text_leaves_the_history_as_it_was(server: OpenAIServer) -> None:
    server.add(Reply("late", delay=5.0), "after")
    async with chat(server) as agent:
        with anyio.move_on_after(0.1):
            await collect(agent, "q")
        assert agent.history == ()
        assert await agent.send("again") == "after"
    assert server.requests[1].messages == [{"role": "user", "content": "again"}]


async def test_a_server_that_does_not_stream_still_gives_its_reply(anyio_backend: str) -> None:
    seen: list[httpx.Request] = []
    async with mock_client(lambda request: httpx.Response(200, json=completion("whole")), seen) as client:
        agent = ChatAgent("http://test/v1", "m", client=client)
        assert await collect(agent, "q") == ["whole"]
        await agent.aclose()
        assert not client.is_closed  # the agent closes only the client it made
    assert json.loads(seen[0].content)["stream"] is True


async def test_a_plain_reply_at_the_token_limit_is_not_taken_for_a_whole_one(server: OpenAIServer) -> None:
    server.add(Reply("<dial><dial-inform>and on", finish_reason="length"), "after")
    async with chat(server) as agent:
        with pytest.raises(TokenLimitReached, match="token limit"):
            await agent.send("q")
        assert agent.history == ()  # as after any failed send: the message goes again, with what is owed
        assert await agent.send("q") == "after"
    assert server.requests[1].messages == [{"role": "user", "content": "q"}]


async def test_a_completion_for_a_stream_at_the_token_limit_is_cut(anyio_backend: str) -> None:
    body = completion("<dial><dial-inform>and on")
    body["choices"][0]["finish_reason"] = "length"
    async with mock_client(lambda request: httpx.Response(200, json=body), []) as client:
        agent = ChatAgent("http://test/v1", "m", client=client)
        pieces: list[str] = []
        with pytest.raises(TokenLimitReached):
            async for piece in agent.stream("q"):
                pieces.append(piece)
        assert pieces == ["<dial><dial-inform>and on"]


# ---------------------------------------------------------------------------------------------- retry policy


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
async def test_a_transient_status_is_retried(server: OpenAIServer, status: int) -> None:
    server.add(Error(status, "try later"), "ok")
    async with chat(server) as agent:
        assert await agent.send("q") == "ok"
        assert agent.history[-1] == ChatMessage(role="assistant", content="ok")
    assert len(server.requests) == 2
    assert server.requests[1].messages == [{"role": "user", "content": "q"}]  # the failed try left no trace


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_an_error_that_is_not_transient_raises_at_once_with_the_servers_message(
    server: OpenAIServer, status: int
) -> None:
    server.add(Error(status, "The model `nope` does not exist"), "never")
    async with chat(server) as agent:
        with pytest.raises(AgentError, match="The model `nope` does not exist") as caught:
            await agent.send("q")
        assert agent.history == ()
    assert caught.value.status == status
    assert f"HTTP {status}" in str(caught.value)
    assert len(server.requests) == 1
    assert server.remaining == 1


async def test_an_error_body_that_is_not_json_is_quoted(server: OpenAIServer) -> None:
    server.add(Error(404, body="<html>no such route</html>"))
    async with chat(server) as agent:
        with pytest.raises(AgentError, match="no such route"):
            await agent.send("q")


async def test_a_429_waits_as_long_as_retry_after_says(server: OpenAIServer) -> None:
    server.add(Error(429, "slow down", retry_after=0.2), "ok")
    async with chat(server, backoff=0.0, max_backoff=0.0) as agent:  # without Retry-After: no wait at all
        assert await agent.send("q") == "ok"
    first, second = server.requests
    assert second.received - first.received >= 0.19


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"Retry-After": " 0.5 "}, 0.5),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:10 -0000"}, 10.0),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
        ({"retry-after-ms": "soon", "Retry-After": "9"}, 9.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-1"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": ""}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(headers: dict[str, str], expected: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after(httpx.Headers(headers), now=now) == expected


async def test_a_dropped_connection_is_retried(server: OpenAIServer) -> None:
    server.add(Drop(), Reply("ok", chunks=2), Drop(), Reply("streamed", chunks=2))
    async with chat(server) as agent:
        assert await agent.send("q") == "ok"
        assert await collect(agent, "r") == ["stre", "amed"]
    assert len(server.requests) == 4


async def test_a_stream_that_breaks_before_its_first_text_is_retried(server: OpenAIServer) -> None:
    server.add(Reply("lost", chunks=2, drop_after=0), Error(503), Reply("found", chunks=1))
    async with chat(server) as agent:
        assert await collect(agent, "q") == ["found"]
        assert agent.history[-1] == ChatMessage(role="assistant", content="found")
    assert len(server.requests) == 3


async def test_a_stream_is_never_retried_once_its_answer_has_started(server: OpenAIServer) -> None:
    server.add(Reply("abcdef", chunks=3, drop_after=1), "never")
    received: list[str] = []
    async with chat(server) as agent:
        with pytest.raises(AgentError, match="broke off after it had started") as caught:
            async for piece in agent.stream("q"):
                received.append(piece)
        assert agent.history == (
            ChatMessage(role="user", content="q"),
            ChatMessage(role="assistant", content="ab"),
        )
    assert received == ["ab"]
    assert caught.value.status == 200
    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)
    assert len(server.requests) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_when_the_retries_are_used_up_the_last_failure_is_raised(
    server: OpenAIServer, streamed: bool
) -> None:
    server.add(Error(500, "boom"), Error(502, "boom"), Error(503, "still boom"), "never")
    async with chat(server, max_retries=2) as agent:
        with pytest.raises(AgentError, match="gave up after 3 attempts: HTTP 503: still boom") as caught:
            if streamed:
                await collect(agent, "q")
            else:
                await agent.send("q")
    assert caught.value.status == 503
    assert len(server.requests) == 3
    assert server.remaining == 1


async def test_retries_used_up_on_connection_errors_keep_the_cause(server: OpenAIServer) -> None:
    server.add(Drop(), Drop())
    async with chat(server, max_retries=1) as agent:
        with pytest.raises(AgentError, match="gave up after 2 attempts: the server broke off") as caught:
            await agent.send("q")
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)


async def test_a_request_timeout_is_retried(server: OpenAIServer) -> None:
    server.add(Reply("slow", delay=5.0), "fast")
    async with chat(server, timeout=0.1) as agent:
        assert await agent.send("q") == "fast"
    assert len(server.requests) == 2


async def test_the_callers_deadline_cuts_a_retry_wait_short(server: OpenAIServer) -> None:
    server.add(Error(429, "slow down", retry_after=30), "never")
    async with chat(server) as agent:
        started = anyio.current_time()
        with anyio.move_on_after(0.5) as scope:
            await agent.send("q")
        assert scope.cancelled_caught
        assert anyio.current_time() - started < 30
        assert agent.history == ()
    assert len(server.requests) == 1


async def test_an_error_another_try_would_not_fix_raises_at_once(anyio_backend: str) -> None:
    async with ChatAgent("ftp://127.0.0.1:1/v1", "m") as agent:
        with pytest.raises(AgentError, match="UnsupportedProtocol"):
            await agent.send("q")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"not json", "the response is not JSON"),
        (b'{"choices": []}', "no choices"),
        (b'{"choices": [{"message": {"role": "assistant", "content": null}}]}', "no choices"),
        (b'{"error": {"message": "overloaded"}}', "the server reported an error: overloaded"),
    ],
)
async def test_a_response_that_is_not_a_completion_raises(anyio_backend: str, body: bytes, problem: str) -> None:
    seen: list[httpx.Request] = []
    async with mock_client(lambda request: httpx.Response(200, content=body), seen) as client:
        agent = ChatAgent("http://test/v1", "m", client=client)
        with pytest.raises(AgentError, match=problem):
            await agent.send("q")
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        (b"data: {not json}\n\n", "a streamed event is not JSON"),
        (b'data: {"error": {"message": "overloaded"}}\n\n', "the server reported an error: overloaded"),
    ],
)
async def test_a_stream_that_is_not_a_completion_raises(anyio_backend: str, events: bytes, problem: str) -> None:
    headers = {"content-type": "text/event-stream"}
    seen: list[httpx.Request] = []
    async with mock_client(lambda request: httpx.Response(200, content=events, headers=headers), seen) as client:
        agent = ChatAgent("http://test/v1", "m", client=client)
        with pytest.raises(AgentError, match=problem):
            await collect(agent, "q")


def test_retry_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        ChatAgent("http://test/v1", "m", max_retries=-1)
    with pytest.raises(ValueError, match="backoff"):
        ChatAgent("http://test/v1", "m", backoff=-0.5)


# ---------------------------------------------------------------------------------------------- the key


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_the_api_key_never_leaks(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture, streamed: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"Incorrect API key provided: {KEY}"
    server.add(Error(503, echo), Drop(), Error(401, echo))
    async with chat(server, api_key=KEY) as agent:
        with pytest.raises(AgentError) as caught:
            if streamed:
                await collect(agent, "q")
            else:
                await agent.send("q")
        texts = [repr(agent), str(agent), "".join(traceback.format_exception(caught.value))]
    texts += [record.getMessage() for record in caplog.records]
    assert caught.value.status == 401
    assert "Incorrect API key provided: [redacted]" in str(caught.value)
    assert any("[redacted]" in record.getMessage() for record in caplog.records)  # the retry was logged
    assert [text for text in texts if KEY in text] == []
    assert {request.headers["authorization"] for request in server.requests} == {f"Bearer {KEY}"}


# ---------------------------------------------------------------------------------------------- conversations


@pytest.mark.parametrize("transport", ["agent", "send-only"])
async def test_a_whole_conversation_runs_over_http(server: OpenAIServer, transport: str) -> None:
    domain = Notes(context='<context notes="0"/>')
    prompt = system_prompt(domain)
    server.add(Reply(ADD_MILK, chunks=9, interval=0.001), Reply(THANKS, chunks=3))
    events: list[Any] = []
    async with chat(server, system_prompt=prompt) as agent:
        # The agent as it is (the runtime may stream from it), or only its plain send.
        speaker: Any = agent if transport == "agent" else types.SimpleNamespace(send=agent.send)
        human = policy_human("accept")
        conversation = Conversation(agent=speaker, domain=domain, human=human, on_event=events.append)
        result = await conversation.say("add a note: buy milk")
    assert (result.status, result.turns) == ("idle", 2)
    assert [(outcome.id, outcome.status) for outcome in result.outcomes] == [("sg-1", "done")]
    assert domain.notes == ["buy milk"]
    sent = [event.message for event in events if event.type == "sent"]
    assert sent[1].startswith(outcome_reply(result.outcomes))
    first, second = server.requests
    assert first.messages == [{"role": "system", "content": prompt}, {"role": "user", "content": sent[0]}]
    assert second.messages == [
        {"role": "system", "content": prompt},
        {"role": "user", "content": sent[0]},
        {"role": "assistant", "content": ADD_MILK},
        {"role": "user", "content": sent[1]},
    ]
    if transport == "send-only":
        assert not any(request.stream for request in server.requests)


async def test_a_conversation_whose_agent_is_too_slow_gets_no_reply_and_goes_on(server: OpenAIServer) -> None:
    server.add(Reply(ADD_MILK, delay=5.0), THANKS)
    async with chat(server) as agent:
        conversation = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"), timeout=0.2)
        assert (await conversation.say("hello")).status == "no-reply"
        assert agent.history == ()
        conversation.timeout = 30.0
        assert (await conversation.say("again")).status == "idle"
    assert server.requests[1].messages == [{"role": "user", "content": "again"}]


async def test_a_conversation_re_raises_the_agents_error(server: OpenAIServer) -> None:
    server.add(Error(401, "Invalid API key"), THANKS)
    async with chat(server) as agent:
        conversation = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"))
        with pytest.raises(AgentError, match="Invalid API key"):
            await conversation.say("hello")
        assert (await conversation.say("again")).status == "idle"


# ---------------------------------------------------------------------------------------------- recorded agents


async def recorded_conversation() -> Conversation:
    conversation = Conversation(agent=Agent([ADD_MILK, THANKS]), domain=Notes(), human=policy_human("accept"))
    await conversation.say("add a note: buy milk")
    return conversation


@pytest.mark.parametrize("form", ["entries", "events", "json"])
async def test_a_recorded_agent_replays_a_conversations_log(form: str) -> None:
    original = await recorded_conversation()
    forms: dict[str, list[Any]] = {
        "entries": list(original.log),
        "events": [entry.event for entry in original.log],
        "json": [json.loads(json.dumps(entry_to_dict(entry))) for entry in original.log],
    }
    agent = RecordedAgent.from_log(forms[form])
    replay = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"))
    result = await replay.say("add a note: buy milk")
    assert [(outcome.id, outcome.status) for outcome in result.outcomes] == [("sg-1", "done")]
    assert agent.sent == list(agent.expected)
    assert len(agent.sent) == 2
    with pytest.raises(LookupError, match="no recorded reply left for message 3"):
        agent.send("more")


def test_a_recorded_agent_from_replies_records_what_it_was_sent() -> None:
    agent = RecordedAgent(["first"])
    assert agent.send("a") == "first"
    with pytest.raises(LookupError, match="message 2"):
        agent.send("b")
    assert (agent.sent, agent.expected) == (["a", "b"], ())


def test_a_recorded_agent_refuses_what_is_not_a_log() -> None:
    with pytest.raises(TypeError, match="expected log entries or events, got 42"):
        RecordedAgent.from_log([42])


# ---------------------------------------------------------------------------------------------- delivery


@pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
async def test_a_message_resent_after_a_crash_reaches_the_history_once(
    server: OpenAIServer, tmp_path: Path, anyio_backend: str
) -> None:
    """A process killed after sending an outcome report, before any reply: the report goes again with the next
    words, and the history rebuilt from the log holds it once (the copy that got the reply)."""
    url, runs = f"sqlite:{tmp_path / 'logs.db'}", FileNotes(tmp_path / "runs")
    store = open_store(url)
    try:
        left = await crash("report", anyio_backend, url, "c-1", runs, store)
        assert left[-1].event.type == "sent" and "sg-1:done" in left[-1].event.message
        conversation = await Conversation.open(store, "c-1", agent=Agent([OK]), domain=runs, human=policy_human())
        await conversation.say("again")
        log = list(conversation.log)
    finally:
        await store.aclose()
    sent = [entry.event.message for entry in log if isinstance(entry.event, SentEvent)]
    assert sum("sg-1:done" in message for message in sent) == 2  # at least once: the report went twice
    ids = [entry.event.message_id for entry in log if isinstance(entry.event, SentEvent)]
    assert ids == ["c-1/reply-1", "c-1/reply-2", "c-1/reply-2"]  # the copy sent again has the first's id

    history = history_from_log(log)
    assert sum(message.content.count("sg-1:done") for message in history) == 1
    assert [message.role for message in history] == ["user", "assistant"] * 2
    server.add("fine")
    async with chat(server, history=history) as agent:
        await agent.send("next")
    told = [message["content"] for message in server.requests[0].messages]
    assert sum(text.count("sg-1:done") for text in told) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_an_agent_that_cannot_be_reached_is_reported_with_its_cause_not_as_slow(streamed: bool) -> None:
    """Nothing listens where the agent points: the conversation's deadline passes while the agent retries, and
    the log (so the person, on every surface) says the connection failed and was retried, not only that the
    agent was slow; a replay of the log agrees."""
    agent = ChatAgent(f"http://127.0.0.1:{free_port()}/v1", "m", backoff=0.05, max_backoff=0.1, max_retries=1000)
    chosen: Any = agent if streamed else PlainAgent(agent)
    conversation = Conversation(agent=chosen, domain=Notes(), human=policy_human(), timeout=1.0)
    async with agent:
        result = await conversation.say("add milk")
    assert result.status == "no-reply"
    (notice,) = [item for item in project(conversation.log).items if isinstance(item, Notice)]
    assert "didn't reply within 1s" in notice.text and "retried" in notice.text, notice.text
    assert "could not connect" in notice.text and "tries" in notice.text, notice.text
    assert replay(conversation.log).divergences == ()
