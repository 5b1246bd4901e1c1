"""The tool-call codec end to end against a real model: Qwen2.5-Coder-0.5B-Instruct on llama.cpp's
``llama-server`` (``scripts/fetch_qwen.sh``; the server as in ``tests/llm/test_llama.py``).

The server renders the domain's tools with the model's chat template and parses the calls the template names
(``<tool_call>`` tags); this small model writes its call as bare JSON instead, which the codec reads as the call.
A call the server itself parsed is checked with the official ``openai`` client: the model is started inside the
tags (an assistant message the server continues), so the server returns a structured ``tool_calls`` message.
Every request the codec builds after a call (the call, its ``tool`` result) must be one the server takes. The
structured-output codec's schema goes as ``response_format``, which the server turns into a grammar. The
server answers the Anthropic Messages API too (``/v1/messages``): the same through :class:`AnthropicAgent` and
the official ``anthropic`` client; and the OpenAI Responses API (``/v1/responses``): the same through
:class:`ResponsesAgent` and the official ``openai`` client's ``responses.create``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import anthropic
import anyio
import httpx
import openai
import pytest

from dial_runtime import Conversation, parse, policy_human
from dial_runtime.errors import TokenLimitReached
from dial_runtime.language.outcomes import Outcome, outcome_reply
from dial_runtime.language.records import Suggest
from dial_runtime.llm.anthropic import AnthropicAgent
from dial_runtime.llm.chat import ChatAgent
from dial_runtime.llm.codecs import AnthropicToolCodec, ToolCallCodec, codec_for, responses_input
from dial_runtime.llm.responses import ResponsesAgent
from dial_runtime.llm.uri import agent_from_uri
from dial_runtime.runtime.events import OutcomeEvent, ReplyCutEvent, ReplyEvent, SendFailedEvent

from .test_llama import REQUEST, Notes, llama_server, qwen

pytestmark = [pytest.mark.llama, pytest.mark.anyio]

SETTINGS: dict[str, Any] = {"temperature": 0.0, "seed": 1, "max_tokens": 120}
#: The same, with no prompt cache, for the official clients, whose create methods do not all take them (the server
#: reads them from the body), and for the Responses API, which has no seed of its own.
REPEATABLE: dict[str, Any] = {"temperature": 0.0, "seed": 1, "cache_prompt": False}
#: No prompt cache: a reply then does not depend on what the server answered before.
NO_CACHE: dict[str, Any] = {"cache_prompt": False}


@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A llama-server serving Qwen: its base URL."""
    with llama_server(tmp_path_factory.mktemp("qwen") / "server.log", qwen()) as (url, _):
        yield url


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class SendOnly:
    """The agent without its stream: the runtime then sends whole."""

    def __init__(self, agent: ChatAgent) -> None:
        self.agent = agent

    async def send(self, message: str) -> Any:
        return await self.agent.send(message)


class Talk(NamedTuple):
    """How :func:`converse` went: the conversation, its whole replies (a reply cut at the token limit, which has no
    model message to keep, left out) and the body of the last request."""

    conversation: Conversation
    replies: list[ReplyEvent]
    last_request: dict[str, Any]


async def converse(make: Callable[[httpx.AsyncClient], ChatAgent], domain: Notes, *, streamed: bool) -> Talk:
    """Ask the agent ``make`` gives (its HTTP client the one passed) to add a note, accepting what it proposes,
    for two replies at most.

    After the call's result this 0.5B model may run on past its token limit (repeating the call and the result
    as text): the server took the request all the same, which is what these tests check, so that ending is
    allowed; a second reply, when there is one, is whole."""
    bodies: list[bytes] = []

    async def keep(request: httpx.Request) -> None:
        bodies.append(request.content)

    async with httpx.AsyncClient(timeout=REQUEST, event_hooks={"request": [keep]}) as client:
        agent = make(client)
        conversation = Conversation(
            agent=agent if streamed else SendOnly(agent),
            domain=domain,
            human=policy_human("accept"),
            timeout=REQUEST,
            max_turns=2,
        )
        with anyio.fail_after(3 * REQUEST), contextlib.suppress(TokenLimitReached):
            await conversation.say("Add a note: buy milk")
    logged = [entry.event for entry in conversation.log]
    replies = [event for event in logged if isinstance(event, ReplyEvent)]
    ran_long = [
        event
        for event in logged
        if (isinstance(event, SendFailedEvent) and "token limit" in event.error)
        or (isinstance(event, ReplyCutEvent) and event.cause == "token-limit")
    ]
    answered = {event.turn for event in (*replies, *ran_long)}  # a cut reply is logged, then its cut
    assert answered == {1, 2}, "the server took the call and its result, and the model answered"
    cut = {event.turn for event in ran_long}
    whole = [reply for reply in replies if reply.turn not in cut]
    return Talk(conversation, whole, json.loads(bodies[-1]))


def outcomes(conversation: Conversation) -> list[Outcome]:
    return [entry.event.outcome for entry in conversation.log if isinstance(entry.event, OutcomeEvent)]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_a_call_becomes_a_suggestion_and_its_outcome_the_calls_result(
    qwen_server: str, streamed: bool
) -> None:
    domain = Notes()
    talk = await converse(
        lambda client: ChatAgent.for_domain(
            f"{qwen_server}/v1", "qwen", domain, codec="tools", client=client, extra_body=NO_CACHE, **SETTINGS
        ),
        domain,
        streamed=streamed,
    )
    assert domain.notes == ["buy milk"]
    (outcome,) = outcomes(talk.conversation)
    assert outcome.status == "done"
    assert all(reply.provider is not None for reply in talk.replies)
    history = talk.last_request["messages"]
    (called,) = [message for message in history if message.get("tool_calls")]
    assert called["tool_calls"][0]["id"] == outcome.id
    (answered,) = [message for message in history if message["role"] == "tool"]
    assert answered["tool_call_id"] == outcome.id and answered["content"].startswith("Done: Add the note")


async def test_a_call_the_server_parsed_is_read_and_its_result_is_taken(qwen_server: str) -> None:
    codec = ToolCallCodec.for_domain(Notes())
    client = openai.AsyncOpenAI(base_url=f"{qwen_server}/v1", api_key="none", max_retries=0)
    history: list[dict[str, Any]] = codec.incoming("Add a note: buy milk", [])
    tools = codec.request_fields()["tools"]
    async with client:
        with anyio.fail_after(REQUEST):
            started = [*history, {"role": "assistant", "content": "<tool_call>\n"}]
            completion = await client.chat.completions.create(
                model="qwen", messages=started, tools=tools, extra_body=NO_CACHE, **SETTINGS
            )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
        message = choice.message.model_dump(exclude_none=True)
        read = codec.read(message, history)
        envelope = parse(read.dial)
        assert envelope is not None
        (suggestion,) = envelope.elements
        assert isinstance(suggestion, Suggest) and suggestion.action == "add-note"
        assert suggestion.id == choice.message.tool_calls[0].id
        assert suggestion.payload == {"text": "buy milk"}

        history.append(read.message)
        done = Outcome(id=suggestion.id, action="add-note", status="done", result={"count": 1}, preview="Add it")
        history += codec.incoming(outcome_reply([done]), history)
        assert history[-1] == {
            "role": "tool",
            "tool_call_id": suggestion.id,
            "content": 'Done: Add it.\n{"action":"add-note","status":"done","result":{"count":1}}',
        }
        with anyio.fail_after(REQUEST):
            after = await client.chat.completions.create(
                model="qwen", messages=history, tools=tools, extra_body=NO_CACHE, **SETTINGS
            )
        assert after.choices[0].message.role == "assistant"


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_structured_output_constrains_every_reply_to_the_schema(qwen_server: str, streamed: bool) -> None:
    """With ``response_format`` the server decodes to the reply's schema: every reply is an object of acts, its
    suggestions name the domain's actions, and each proposal gets one outcome."""
    domain = Notes()
    uri = f"llamacpp:qwen@{qwen_server.removeprefix('http://')}?codec=json&temperature=0&seed=1&max_tokens=120&extra.cache_prompt=false"
    agent = agent_from_uri(uri, domain=domain)
    async with agent:  # type: ignore[union-attr]
        conversation = Conversation(
            agent=agent if streamed else SendOnly(agent),  # type: ignore[arg-type]
            domain=domain,
            human=policy_human("accept"),
            timeout=REQUEST,
            max_turns=2,
        )
        with anyio.fail_after(3 * REQUEST):
            result = await conversation.say("Add a note: buy milk")
    replies = [entry.event for entry in conversation.log if isinstance(entry.event, ReplyEvent)]
    assert replies
    for reply in replies:
        assert reply.provider is not None
        assert isinstance(json.loads(reply.provider.message["content"])["acts"], list)
    proposed = [entry.event for entry in conversation.log if entry.event.type == "proposed"]
    assert len(result.outcomes) == len(proposed)
    assert all(event.action in domain.actions for event in proposed)


# --- the Anthropic Messages API, which llama-server answers at /v1/messages ------------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_an_anthropic_conversation_runs_each_call_once_and_answers_it(
    qwen_server: str, streamed: bool
) -> None:
    domain = Notes()
    talk = await converse(
        lambda client: AnthropicAgent.for_domain(
            qwen_server, "qwen", domain, client=client, temperature=0.0, max_tokens=120, extra_body=NO_CACHE
        ),
        domain,
        streamed=streamed,
    )
    assert domain.notes == ["buy milk"]
    (outcome,) = outcomes(talk.conversation)
    assert all(reply.provider is not None and reply.provider.api == "anthropic-messages" for reply in talk.replies)
    blocks = [
        block
        for message in talk.last_request["messages"]
        if isinstance(message["content"], list)  # the person's first words are a string
        for block in message["content"]
    ]
    (used,) = [block for block in blocks if block["type"] == "tool_use"]
    (result_block,) = [block for block in blocks if block["type"] == "tool_result"]
    assert used["id"] == outcome.id == result_block["tool_use_id"] and "is_error" not in result_block


async def test_a_tool_use_the_server_parsed_is_read_and_its_result_is_taken(qwen_server: str) -> None:
    codec = AnthropicToolCodec.for_domain(Notes())
    client = anthropic.AsyncAnthropic(base_url=qwen_server, api_key="none", max_retries=0)
    history: list[dict[str, Any]] = codec.incoming("Add a note: buy milk", [])
    tools = codec.request_fields()["tools"]
    async with client:
        with anyio.fail_after(REQUEST):
            started = [*history, {"role": "assistant", "content": "<tool_call>\n"}]
            reply = await client.messages.create(
                model="qwen", max_tokens=60, messages=started, tools=tools, extra_body=REPEATABLE
            )
        assert reply.stop_reason == "tool_use", reply
        read = codec.read(reply.model_dump(exclude_none=True), history)
        envelope = parse(read.dial)
        assert envelope is not None
        (suggestion,) = envelope.elements
        assert isinstance(suggestion, Suggest) and suggestion.payload == {"text": "buy milk"}
        (block,) = [block for block in reply.content if block.type == "tool_use"]
        assert suggestion.id == block.id

        history.append(read.message)
        refused = Outcome(id=suggestion.id, action="add-note", status="dismissed", preview="Add it")
        history += codec.incoming(outcome_reply([refused]), history)
        result = history[-1]["content"][0]
        assert result["tool_use_id"] == block.id and result["is_error"] is True
        with anyio.fail_after(REQUEST):
            after = await client.messages.create(
                model="qwen", max_tokens=60, messages=history, tools=tools, extra_body=REPEATABLE
            )
        assert after.role == "assistant"


# --- the OpenAI Responses API, which llama-server answers at /v1/responses ----------------------------------


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
async def test_a_responses_conversation_runs_the_call_once_and_answers_it(
    qwen_server: str, streamed: bool
) -> None:
    domain = Notes()
    talk = await converse(
        lambda client: ResponsesAgent.for_domain(
            f"{qwen_server}/v1",
            "qwen",
            domain,
            codec="tools",
            client=client,
            max_tokens=120,
            extra_body=REPEATABLE,
        ),
        domain,
        streamed=streamed,
    )
    assert domain.notes == ["buy milk"]
    (outcome,) = outcomes(talk.conversation)
    assert all(reply.provider is not None and reply.provider.api == "openai-responses" for reply in talk.replies)
    sent = talk.last_request["input"]
    (made,) = [item for item in sent if item["type"] == "function_call"]
    (output,) = [item for item in sent if item["type"] == "function_call_output"]
    assert made["call_id"] == output["call_id"] == outcome.id and output["output"].startswith("Done: Add the note")


async def test_a_function_call_the_server_parsed_is_read_and_its_output_taken(qwen_server: str) -> None:
    codec = codec_for("tools", Notes(), api="openai-responses")
    client = openai.AsyncOpenAI(base_url=f"{qwen_server}/v1", api_key="none", max_retries=0)
    history: list[dict[str, Any]] = codec.incoming("Add a note: buy milk", [])
    tools = codec.request_fields()["tools"]
    async with client:
        with anyio.fail_after(REQUEST):
            started = [
                *responses_input(history),
                {"type": "message", "role": "assistant", "content": "<tool_call>\n"},
            ]
            response = await client.responses.create(
                model="qwen", input=started, tools=tools, max_output_tokens=60, extra_body=REPEATABLE
            )
        (call,) = [item for item in response.output if item.type == "function_call"]
        read = codec.read(response.model_dump(exclude_none=True), history)
        envelope = parse(read.dial)
        assert envelope is not None
        (suggestion,) = envelope.elements
        assert isinstance(suggestion, Suggest) and suggestion.action == "add-note"
        assert suggestion.id == call.call_id and suggestion.payload == {"text": "buy milk"}

        history.append(read.message)
        done = Outcome(id=suggestion.id, action="add-note", status="done", result={"count": 1}, preview="Add it")
        history += codec.incoming(outcome_reply([done]), history)
        assert responses_input(history)[-1] == {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": 'Done: Add it.\n{"action":"add-note","status":"done","result":{"count":1}}',
        }
        with anyio.fail_after(REQUEST):
            after = await client.responses.create(
                model="qwen",
                input=responses_input(history),
                tools=tools,
                max_output_tokens=60,
                extra_body=REPEATABLE,
            )
        assert after.status == "completed" and after.output
