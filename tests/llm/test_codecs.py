"""The codecs: what a model is sent and how its answer is read, for every outcome, shape of call and way a
stream ends; through the codec alone, and through a conversation with a ChatAgent over real HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import ActionSpec, Conversation, parse, policy_human, replay, scripted_human
from dial_runtime.agents.prompt import json_prompt, system_prompt, tools_prompt
from dial_runtime.cli import main
from dial_runtime.errors import TokenLimitReached
from dial_runtime.language.outcomes import (
    Outcome,
    compact_json,
    correction_reply,
    outcome_reply,
    read_reports,
    refusal_reply,
)
from dial_runtime.language.records import AskElement, Inform, Option, Suggest
from dial_runtime.llm.anthropic import AnthropicAgent
from dial_runtime.llm.chat import ChatAgent, history_from_log
from dial_runtime.llm.codecs import (
    AnthropicToolCodec,
    DialCodec,
    StructuredCodec,
    ToolCallCodec,
    chat_message,
    codec_for,
    domain_tools,
    reply_schema,
    responses_input,
)
from dial_runtime.llm.responses import ResponsesAgent
from dial_runtime.llm.uri import agent_from_uri
from dial_runtime.runtime.core import UNRAN_CLAIM
from dial_runtime.runtime.events import ReplyCutEvent, ReplyEvent, SuggestionEvent
from dial_runtime.stores import SQLiteStore
from dial_runtime.views.agent import Called
from dial_runtime.views.person import AgentText, Card, project

from ..fakes import Notes, StreamingAgent
from ..openai_server import Call, OpenAIServer, Reply

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TypedNotes(Notes):
    """The fakes' notes, with a vocabulary whose schemas become the tools' parameters."""

    vocabulary: ClassVar[dict[str, Any]] = {
        "add-note": {
            "description": "Add one note.",
            "schema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        }
    }


class RecordingAgent:
    """Replies from a list, and keeps every message it was sent."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.seen = list(replies), []

    def send(self, message: str) -> str:
        self.seen.append(message)
        return self.replies.pop(0)


def events(conversation: Conversation) -> list[Any]:
    return [entry.event for entry in conversation.log]


def codec() -> ToolCallCodec:
    return ToolCallCodec.for_domain(TypedNotes())


def elements(dial: str) -> list[Any]:
    envelope = parse(dial)
    assert envelope is not None and not envelope.issues, envelope
    return list(envelope.elements)


# --- the tools ------------------------------------------------------------------------------------------------


def test_each_action_is_a_tool_with_its_schema_and_marks_then_ask_user() -> None:
    tools = {tool.name: tool for tool in domain_tools(TypedNotes())}
    assert list(tools) == ["add-note", "remove-note", "list-notes", "open-poll", "fail-note", "ask_user"]
    assert tools["add-note"].parameters["required"] == ["text"]
    assert tools["add-note"].description.startswith("Add one note. It changes something.")
    assert "cannot be undone" in tools["remove-note"].description
    assert "only reads" in tools["list-notes"].description
    assert tools["list-notes"].parameters == {"type": "object"}
    assert tools["ask_user"].action is None


def test_names_the_api_refuses_are_rewritten_and_kept_apart() -> None:
    class Odd:
        actions: ClassVar[dict[str, Any]] = {
            "notes.add": ActionSpec(mutates=False),
            "notes_add": ActionSpec(mutates=False),
            "ask_user": ActionSpec(mutates=False),
            "x" * 80: ActionSpec(mutates=False),
        }

    tools = domain_tools(Odd())
    assert [(tool.name, tool.action) for tool in tools] == [
        ("notes_add", "notes.add"),
        ("notes_add_2", "notes_add"),
        ("ask_user", "ask_user"),
        ("x" * 60, "x" * 80),
        ("ask_user_2", None),
    ]
    dial = ToolCallCodec(tools).read(_calls(("c1", "notes_add_2", "{}"), ("c2", "ask_user_2", "{}")), []).dial
    suggestion, ask = elements(dial)
    assert isinstance(suggestion, Suggest) and suggestion.action == "notes_add"
    assert isinstance(ask, AskElement)


@pytest.mark.parametrize("strict", [False, True])
def test_the_request_carries_the_tools(strict: bool) -> None:
    fields = ToolCallCodec.for_domain(TypedNotes(), strict=strict).request_fields()
    first = fields["tools"][0]
    assert first["type"] == "function" and first["function"]["name"] == "add-note"
    assert ("strict" in first["function"]) is strict


def test_codecs_by_name() -> None:
    assert isinstance(codec_for("dial"), DialCodec)
    assert isinstance(codec_for("tools", TypedNotes()), ToolCallCodec)
    with pytest.raises(ValueError, match="unknown codec 'xml'; use one of dial, tools, json"):
        codec_for("xml")
    with pytest.raises(ValueError, match="needs the domain"):
        codec_for("tools")
    assert isinstance(codec_for("json", TypedNotes()), StructuredCodec)


# --- reading the model ----------------------------------------------------------------------------------------


def _calls(*calls: tuple[str, str, str], content: str | None = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}
            for ident, name, arguments in calls
        ],
    }


def test_each_call_is_a_suggestion_with_its_id_and_the_text_an_inform() -> None:
    read = codec().read(
        _calls(("call_a", "add-note", '{"text":"milk"}'), ("call_b", "list-notes", "{}"), content="On it."), []
    )
    inform, first, second = elements(read.dial)
    assert isinstance(inform, Inform) and inform.text == "On it."
    assert (first.id, first.action, first.payload) == ("call_a", "add-note", {"text": "milk"})
    assert (second.id, second.action, second.payload) == ("call_b", "list-notes", {})
    assert read.message["tool_calls"][1]["id"] == "call_b"


def test_a_call_without_an_id_gets_one_from_its_place() -> None:
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    read = codec().read(_calls(("", "list-notes", "{}"), ("", "list-notes", "{}")), history)
    assert [element.id for element in elements(read.dial)] == ["call-2-1", "call-2-2"]
    assert [call["id"] for call in read.message["tool_calls"]] == ["call-2-1", "call-2-2"]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"question": "Which list?", "options": ["home", "work"]}', ("Which list?", ("home", "work"), "choice")),
        ('{"question": "What should it say?", "options": []}', ("What should it say?", (), "text")),
        ("not json", ("not json", (), "text")),
    ],
)
def test_ask_user_is_an_ask(arguments: str, expected: tuple[str, tuple[str, ...], str]) -> None:
    (ask,) = elements(codec().read(_calls(("call_q", "ask_user", arguments)), []).dial)
    assert isinstance(ask, AskElement)
    assert (ask.text, tuple(option.value for option in ask.options), ask.response_type) == expected
    assert ask.id == "call_q"


@pytest.mark.parametrize(
    "text",
    [
        "Sure! I've added it.",
        '<dial><dial-suggest action="remove-note">{"text":"x"}</dial-suggest></dial>',
        "```xml\n<dial><dial-inform>hi</dial-inform></dial>\n```",
        "a < b && c > d\r\n",
        '{"name": "unknown-tool", "arguments": {}}',
        '{"name": "add-note", "arguments": {"text": "x"}} and then some',
    ],
)
def test_the_models_text_is_only_ever_an_inform(text: str) -> None:
    """Whatever the text holds (DIAL of its own, markup, a call to a tool that does not exist), it is the
    model's words: one inform with exactly that text, never an act of its own."""
    (inform,) = elements(codec().read({"role": "assistant", "content": text}, []).dial)
    assert isinstance(inform, Inform) and inform.text == text.strip()


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "add-note", "arguments": {"text": "milk"}}',
        '<tool_call>\n{"name": "add-note", "arguments": {"text": "milk"}}\n</tool_call>',
        '```json\n{"name": "add-note", "arguments": {"text": "milk"}}\n```',
        '[{"name": "add-note", "arguments": {"text": "milk"}}]',
    ],
)
def test_calls_a_model_writes_as_text_are_read_as_calls(text: str) -> None:
    read = codec().read({"role": "assistant", "content": text}, [])
    (suggestion,) = elements(read.dial)
    assert isinstance(suggestion, Suggest) and suggestion.payload == {"text": "milk"}
    assert read.message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-1-1",
                "type": "function",
                "function": {"name": "add-note", "arguments": '{"text":"milk"}'},
            }
        ],
    }


def test_a_reply_without_text_or_calls_is_empty() -> None:
    assert codec().read({"role": "assistant", "content": None}, []).dial == ""


# --- telling the model -----------------------------------------------------------------------------------------

ASKED = "The question was put to the person; their answer is in the next message."
WAITING = "No decision yet: this is waiting for the person, and did not run."


def test_outcomes_answer_their_calls_and_the_rest_is_a_user_message() -> None:
    history = [_calls(("c1", "add-note", "{}"), ("c2", "list-notes", "{}"), ("c3", "ask_user", "{}"))]
    done = Outcome(id="c1", action="add-note", status="done", result={"count": 1}, preview="Add it")
    earlier = Outcome(id="old", action="add-note", status="failed", error="locked")
    message = "\n\n".join(
        [outcome_reply([done, earlier]), refusal_reply("reply-1", "bad"), "<context n='1'/>", "home"]
    )
    sent = codec().incoming(message, history)
    assert sent[0] == {"role": "tool", "tool_call_id": "c1", "content": 'Done: Add it.\n{"action":"add-note",'
                       '"status":"done","result":{"count":1}}'}  # fmt: skip
    assert sent[1]["tool_call_id"] == "c2" and sent[1]["content"].startswith(WAITING)
    assert sent[2] == {"role": "tool", "tool_call_id": "c3", "content": ASKED}
    assert sent[3]["role"] == "user"
    assert sent[3]["content"].split("\n\n") == [
        'Outcome of your call old: Couldn\'t do it: add-note.\n{"action":"add-note","status":"failed",'
        '"error":"locked"}',
        "Your reply could not be used: bad",
        "<context n='1'/>",
        "home",
    ]


def test_calls_answered_before_are_not_answered_again() -> None:
    history = [_calls(("c1", "add-note", "{}")), {"role": "tool", "tool_call_id": "c1", "content": WAITING}]
    sent = codec().incoming("hello", history)
    assert sent == [{"role": "user", "content": "hello"}]


STATUSES = [
    (Outcome(id="c", action="a", status="done", result=1), "Done: a.", {"result": 1}),
    (Outcome(id="c", action="a", status="done", edited=True), "Done: a.", {"edited": True}),
    (Outcome(id="c", action="a", status="failed", error="e", code="k", hint="h"), "Couldn't do it", {"code": "k"}),
    (Outcome(id="c", action="a", status="invalid", code="k", field="f", hint="h"), "is invalid", {"field": "f"}),
    (Outcome(id="c", action="a", status="dismissed"), "The user dismissed: a.", {}),
    (Outcome(id="c", action="a", status="superseded"), "moved on without deciding", {}),
    (Outcome(id="c", action="a", status="superseded", expired=True), "moved on", {"expired": True}),
    (Outcome(id="c", action="a", status="handed-off"), "in its own panel", {}),
]


@pytest.mark.parametrize(("outcome", "words", "facts"), STATUSES)
def test_every_status_goes_back_as_the_calls_tool_result(
    outcome: Outcome, words: str, facts: dict[str, Any]
) -> None:
    (result,) = codec().incoming(outcome_reply([outcome]), [_calls(("c", "a", "{}"))])
    assert result["role"] == "tool" and result["tool_call_id"] == "c"
    acknowledgement, _, fact = result["content"].partition("\n")
    assert words in acknowledgement
    assert json.loads(fact) == {**outcome.fact(), **facts} == json.loads(compact_json(outcome.fact()))


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_OUTCOMES = st.builds(
    Outcome,
    id=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12),
    action=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12),
    status=st.sampled_from(["done", "failed", "invalid", "dismissed", "superseded", "handed-off"]),
    result=_JSON,
    error=st.none() | _TEXT,
    hint=st.none() | _TEXT,
    edited=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(outcomes=st.lists(_OUTCOMES, min_size=1, max_size=3), refusals=st.lists(_TEXT, max_size=2), rest=_TEXT)
def test_what_the_runtime_writes_is_read_back(outcomes: list[Outcome], refusals: list[str], rest: str) -> None:
    parts = [outcome_reply(outcomes), *(refusal_reply("reply-1", why) for why in refusals)]
    parts.append(correction_reply("reply-2", "no"))
    if rest:
        parts.append(rest)
    reports = read_reports("\n\n".join(parts))
    assert [(r.id, r.status, r.fact()) for r in reports.outcomes] == [
        (o.id, o.status, json.loads(compact_json(o.fact()))) for o in outcomes
    ]
    assert len(reports.notices) == len(refusals) + 1
    assert reports.rest == rest


# --- streaming ------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=40),
    calls=st.lists(st.tuples(st.sampled_from(["add-note", "ask_user", "nope"]), _TEXT), max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=6),
)
def test_a_streamed_reply_is_the_start_of_the_whole_reply(text: str, calls: list[Any], cuts: list[int]) -> None:
    """However the text arrives, what is given as it arrives, then the rest, is the reply read whole; and no
    text is given while it could still be calls written as text."""
    reading = codec()
    live = reading.live()
    given_so_far = []
    for start, end in zip([0, *sorted(cuts)], [*sorted(cuts), len(text)], strict=False):
        given_so_far.append(live.feed(text[start:end]))
    message = _calls(*((f"c{i}", name, arguments) for i, (name, arguments) in enumerate(calls)), content=text)
    dial = reading.read(message, []).dial
    assert "".join(given_so_far) + live.finish(dial) == dial
    if text.lstrip().startswith(("{", "[", "<", "`")):
        assert not "".join(given_so_far)


# --- through a conversation, over HTTP ---------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def tools_agent(server: OpenAIServer, domain: Any, **options: Any) -> ChatAgent:
    return ChatAgent.for_domain(server.base_url, "m", domain, codec="tools", max_retries=0, **options)


class Plain:
    """An agent that only sends: the runtime streams from any agent that can."""

    def __init__(self, agent: ChatAgent) -> None:
        self.agent = agent

    async def send(self, message: str) -> Any:
        return await self.agent.send(message)


#: A call, how the person decides, and words the call's result must carry: every way a call can end.
CALL_OUTCOMES = [
    (Call("c1", "add-note", '{"text":"milk"}'), "accept", "Done: Add the note 'milk'."),
    (Call("c1", "add-note", '{"text":"milk"}'), {"edit": {"text": "oat"}}, "Done: Add the note 'oat'"),
    (Call("c1", "add-note", '{"text":"milk"}'), "dismiss", "The user dismissed"),
    (Call("c1", "add-note", '{"text":""}'), "accept", "the payload for add-note is invalid"),
    (Call("c1", "fail-note", "{}"), "accept", "Couldn't do it"),
    (Call("c1", "open-poll", "{}"), "accept", "Passed to the user in its own panel"),
    (Call("c1", "no-such-tool", "{}"), "accept", "the payload for no-such-tool is invalid"),
    (Call("c1", "add-note", '{"text": "mi'), "accept", "the payload for add-note is invalid"),
]


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("call", "human", "words"),
    CALL_OUTCOMES,
)
async def test_each_outcome_reaches_the_model_as_the_calls_result(
    server: OpenAIServer, streamed: bool, call: Call, human: Any, words: str
) -> None:
    server.add(Reply("", tool_calls=[call], chunks=3), Reply("Noted."), Reply("Nothing more."))
    agent = tools_agent(server, TypedNotes())
    async with agent:
        conversation = Conversation(
            agent=agent if streamed else Plain(agent), domain=TypedNotes(), human=scripted_human([human])
        )
        result = await conversation.say("add milk")
        if len(server.requests) == 1:  # nothing ran: the outcome waits for the person's next words
            await conversation.say("and now?")
    assert [outcome.id for outcome in result.outcomes] == ["c1"]
    second = server.requests[1].messages
    (answered,) = [index for index, message in enumerate(second) if message["role"] == "tool"]
    assert second[answered - 1]["tool_calls"][0]["id"] == "c1"
    assert second[answered]["tool_call_id"] == "c1"
    assert words in second[answered]["content"]
    assert json.loads(second[answered]["content"].partition("\n")[2])["status"] == result.outcomes[0].status


async def test_parallel_calls_are_suggestions_of_one_reply_each_answered(server: OpenAIServer) -> None:
    calls = [Call("c1", "add-note", '{"text":"a"}'), Call("c2", "add-note", '{"text":"b"}')]
    server.add(Reply("Adding both.", tool_calls=calls, chunks=4), Reply("Both added."))
    async with tools_agent(server, TypedNotes()) as agent:
        conversation = Conversation(agent=agent, domain=TypedNotes(), human=scripted_human(["accept", "dismiss"]))
        result = await conversation.say("add a and b")
    assert [(o.id, o.status) for o in result.outcomes] == [("c1", "done"), ("c2", "dismissed")]
    sent = server.requests[1].messages
    assert [(m["role"], m.get("tool_call_id")) for m in sent[-3:]] == [
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
    ]
    shown = [event for event in events(conversation) if isinstance(event, SuggestionEvent)]
    assert [event.id for event in shown] == ["c1", "c2"]


async def test_an_answer_to_ask_user_follows_its_result(server: OpenAIServer) -> None:
    ask = Call("q1", "ask_user", '{"question": "Which list?", "options": ["home", "work"]}')
    server.add(Reply("", tool_calls=[ask]), Reply("Thanks."))
    human = scripted_human([{"answer": "work"}])
    async with tools_agent(server, TypedNotes()) as agent:
        conversation = Conversation(agent=agent, domain=TypedNotes(), human=human)
        await conversation.say("add a note")
    (asked,) = human.seen
    assert [option.value for option in asked.options] == ["home", "work"]  # type: ignore[union-attr]
    sent = server.requests[1].messages
    assert sent[-2] == {"role": "tool", "tool_call_id": "q1", "content": ASKED}
    assert sent[-1] == {"role": "user", "content": "work"}


async def test_a_stream_cut_in_the_middle_of_a_call_proposes_nothing(server: OpenAIServer) -> None:
    call = Call("c1", "add-note", '{"text": "milk and more"}')
    server.add(Reply("Adding it.", tool_calls=[call], chunks=4, drop_after=6), Reply("Sorry, again."))
    domain = TypedNotes()
    async with tools_agent(server, domain) as agent:
        conversation = Conversation(agent=agent, domain=domain, human=policy_human("accept"))
        result = await conversation.say("add milk")
    assert result.outcomes == () and domain.ran == []
    assert any(isinstance(event, ReplyCutEvent) for event in events(conversation))
    told = server.requests[1].messages[-1]
    assert told["role"] == "user" and "could not be used" in told["content"]


async def test_a_tools_conversations_log_keeps_the_models_messages_and_works_as_any_log(
    server: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log keeps the DIAL the runtime handled and the model's message; it replays identical, exports,
    imports and verifies, takes the agent up where it was, and the person's view shows the suggestion."""
    server.add(Reply("Adding.", tool_calls=[Call("c1", "add-note", '{"text":"milk"}')], chunks=3), Reply("Done."))
    database = tmp_path / "logs.db"
    store = SQLiteStore(str(database))
    async with tools_agent(server, TypedNotes()) as agent:
        conversation = Conversation(
            agent=agent, domain=TypedNotes(), human=policy_human("accept"), store=store, conversation_id="t"
        )
        await conversation.say("add milk")
    await store.aclose()
    replies = [event for event in events(conversation) if isinstance(event, ReplyEvent)]
    assert replies[0].provider is not None and replies[0].provider.api == "openai-chat"
    assert replies[0].provider.message["tool_calls"][0]["id"] == "c1"
    assert replies[1].provider is not None and replies[1].provider.message["content"] == "Done."

    report = replay(conversation.log, domain=TypedNotes())
    assert report.ok and report.turns == 2, report

    exported, copy = tmp_path / "t.jsonl", tmp_path / "copy.db"
    for argv in (  # the command line runs an event loop of its own: in a thread of its own
        ["export", "t", "--store", f"sqlite:{database}", "-o", str(exported)],
        ["import", str(exported), "--store", f"sqlite:{copy}", "--id", "t"],
        ["verify", "t", "--store", f"sqlite:{copy}"],
    ):
        assert await anyio.to_thread.run_sync(main, argv) == 0, capsys.readouterr().err
    assert " ok: " in capsys.readouterr().out

    taken_up = history_from_log(conversation.log, agent.codec)
    system, *sent = server.requests[1].messages
    assert system == {"role": "system", "content": tools_prompt(TypedNotes())}
    assert [message.wire() for message in taken_up] == [*sent, {"role": "assistant", "content": "Done."}]

    cards = [item for item in project(conversation.log).items if isinstance(item, Card)]
    assert [(card.id, card.preview) for card in cards] == [("c1", "Add the note 'milk'")]


# --- choosing a codec -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "options", "codec_name", "prompt", "grammar"),
    [
        ("openai:gpt-4o-mini", {}, "tools", "tools", False),
        ("openai:gpt-4o-mini?codec=dial", {}, "dial", "dial", False),
        ("llamacpp:qwen", {}, "dial", "dial", True),
        ("llamacpp:qwen", {"constrain": False}, "dial", "dial", False),
        ("llamacpp:qwen?codec=tools", {}, "tools", "tools", False),
        ("ollama:qwen", {}, "dial", "dial", False),
        ("vllm:qwen", {"codec": "tools"}, "tools", "tools", False),
        ("llamacpp:qwen?codec=json", {}, "json", "json", False),
        ("http://127.0.0.1:9/v1?codec=tools#m", {"system_prompt": "mine"}, "tools", "mine", False),
    ],
)
def test_each_uri_speaks_its_codec(
    monkeypatch: pytest.MonkeyPatch, uri: str, options: dict[str, Any], codec_name: str, prompt: str, grammar: bool
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    domain = TypedNotes()
    agent = agent_from_uri(uri, domain=domain, **options)
    assert isinstance(agent, ChatAgent) and agent.codec.name == codec_name
    prompts = {"tools": tools_prompt(domain), "json": json_prompt(domain), "dial": system_prompt(domain)}
    expected = prompts.get(prompt, prompt)
    assert agent.system_prompt == expected
    assert (agent.grammar is not None) is grammar


def test_a_uri_without_a_domain_speaks_dial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = agent_from_uri("openai:gpt-4o-mini")
    assert isinstance(agent, ChatAgent) and agent.codec.name == "dial" and agent.system_prompt == ""


@pytest.mark.parametrize(
    ("uri", "options", "says"),
    [
        ("llamacpp:q?codec=tools", {"domain": None}, "the tools codec needs the domain"),
        ("llamacpp:q?codec=xml", {}, "unknown codec 'xml'; use one of dial, tools, json"),
        ("llamacpp:q?codec=tools&codec=dial", {}, "codec is given twice"),
        ("llamacpp:q?codec=tools", {"constrain": True}, "a grammar constrains DIAL replies"),
        ("ollama:q", {"domain": None, "constrain": True}, "constrain writes the domain's grammar"),
    ],
)
def test_a_codec_that_cannot_be_is_refused(uri: str, options: dict[str, Any], says: str) -> None:
    options = {"domain": TypedNotes(), **options}
    with pytest.raises(ValueError, match=re.escape(says)):
        agent_from_uri(uri, **options)


async def test_a_uri_agent_takes_a_tools_conversation_up_as_the_model_saw_it(server: OpenAIServer) -> None:
    server.add(Reply("", tool_calls=[Call("c1", "add-note", '{"text":"milk"}')]), Reply("Done."), Reply("Bye."))
    uri = f"{server.base_url}?codec=tools#m"
    agent = agent_from_uri(uri, domain=TypedNotes(), max_retries=0)
    async with agent:  # type: ignore[union-attr]
        conversation = Conversation(agent=agent, domain=TypedNotes(), human=policy_human("accept"))
        await conversation.say("add milk")
    again = agent_from_uri(uri, domain=TypedNotes(), log=conversation.log, max_retries=0)
    async with again:  # type: ignore[union-attr]
        await again.send("thanks")
    assert server.requests[2].messages == [
        *server.requests[1].messages,
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "thanks"},
    ]


# --- structured output ----------------------------------------------------------------------------------------


def structured() -> StructuredCodec:
    return StructuredCodec.for_domain(TypedNotes())


def test_the_reply_schema_names_each_action_with_its_payload_schema() -> None:
    schema = structured().schema()
    acts = schema["properties"]["acts"]["items"]["anyOf"]
    assert [act["properties"]["act"]["const"] for act in acts[:2]] == ["inform", "ask"]
    actions = {act["properties"]["action"]["const"]: act["properties"]["payload"] for act in acts[2:]}
    assert list(actions) == ["add-note", "remove-note", "list-notes", "open-poll", "fail-note"]
    assert actions["add-note"]["required"] == ["text"]
    assert all(act["additionalProperties"] is False for act in acts)
    fields = structured().request_fields()["response_format"]
    assert fields["type"] == "json_schema" and fields["json_schema"]["schema"] == schema


def test_local_definitions_move_to_the_root_under_the_actions_name() -> None:
    class Defined:
        actions: ClassVar[dict[str, Any]] = {"plan.trip": ActionSpec(mutates=True)}
        vocabulary: ClassVar[dict[str, Any]] = {
            "plan.trip": {
                "schema": {
                    "type": "object",
                    "properties": {"stops": {"type": "array", "items": {"$ref": "#/$defs/Stop"}}},
                    "$defs": {"Stop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Stop"}}}},
                }
            }
        }

    schema = reply_schema(Defined())
    payload = schema["properties"]["acts"]["items"]["anyOf"][2]["properties"]["payload"]
    assert "$defs" not in payload
    assert payload["properties"]["stops"]["items"] == {"$ref": "#/$defs/plan_trip__Stop"}
    assert schema["$defs"] == {
        "plan_trip__Stop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/plan_trip__Stop"}}}
    }


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"acts": [{"act": "inform", "text": "a < b"}, {"act": "suggest", "action": "add-note", '
            '"text": "Add it", "payload": {"text": "milk"}}]}',
            [("inform", "a < b"), ("suggest", "add-note", {"text": "milk"}, "Add it")],
        ),
        (
            '{"acts": [{"act": "ask", "question": "Which?", "options": ["a", "b"]}]}',
            [("ask", "Which?", ("a", "b"))],
        ),
        ('{"acts": [{"act": "dance"}, {"act": "inform", "text": "hi"}]}', [("inform", "hi")]),
        ("Sure, done!", [("inform", "Sure, done!")]),
        ('{"acts": "none"}', [("inform", '{"acts": "none"}')]),
    ],
)
def test_a_structured_reply_is_read_as_its_acts(content: str, expected: list[Any]) -> None:
    read = structured().read({"role": "assistant", "content": content}, [])
    found: list[Any] = []
    for element in elements(read.dial):
        if isinstance(element, Inform):
            found.append(("inform", element.text))
        elif isinstance(element, Suggest):
            found.append(("suggest", element.action, element.payload, element.text))
        else:
            found.append(("ask", element.text, tuple(option.value for option in element.options)))
    assert found == expected
    assert read.message == {"role": "assistant", "content": content}


@pytest.mark.parametrize(("outcome", "words", "facts"), STATUSES)
def test_every_status_goes_to_a_structured_model_as_its_outcome_object(
    outcome: Outcome, words: str, facts: dict[str, Any]
) -> None:
    (sent,) = structured().incoming(outcome_reply([outcome]), [])
    assert json.loads(sent["content"]) == {"outcomes": [{"id": "c", **outcome.fact(), **facts}]}


@pytest.mark.parametrize(("outcome", "words", "facts"), STATUSES)
def test_every_status_goes_back_as_the_calls_function_call_output(
    outcome: Outcome, words: str, facts: dict[str, Any]
) -> None:
    responses = codec_for("tools", TypedNotes(), api="openai-responses")
    sent = responses_input(
        [_calls(("c", "a", "{}")), *responses.incoming(outcome_reply([outcome]), [_calls(("c", "a", "{}"))])]
    )
    assert sent[-1]["type"] == "function_call_output" and sent[-1]["call_id"] == "c"
    acknowledgement, _, fact = sent[-1]["output"].partition("\n")
    assert words in acknowledgement and json.loads(fact) == {**outcome.fact(), **facts}


def test_messages_go_to_a_structured_model_as_json() -> None:
    done = Outcome(id="sg-1", action="add-note", status="done", result={"count": 1})
    (sent,) = structured().incoming(outcome_reply([done]) + "\n\nthanks", [])
    assert json.loads(sent["content"]) == {
        "outcomes": [{"id": "sg-1", "action": "add-note", "status": "done", "result": {"count": 1}}],
        "message": "thanks",
    }
    (plain,) = structured().incoming("hello", [])
    assert json.loads(plain["content"]) == {"message": "hello"}


async def test_a_structured_conversation_over_http(server: OpenAIServer) -> None:
    proposal = '{"acts": [{"act": "suggest", "action": "add-note", "text": "", "payload": {"text": "milk"}}]}'
    server.add(Reply(proposal, chunks=5), Reply('{"acts": [{"act": "inform", "text": "Added."}]}'))
    domain = TypedNotes()
    async with agent_from_uri(f"{server.base_url}?codec=json#m", domain=domain, max_retries=0) as agent:  # type: ignore[union-attr]
        conversation = Conversation(agent=agent, domain=domain, human=policy_human("accept"))
        result = await conversation.say("add milk")
    assert [(o.id, o.status) for o in result.outcomes] == [("sg-1", "done")] and domain.notes == ["milk"]
    first, second = server.requests
    assert first.body["response_format"]["json_schema"]["name"] == "dial_reply"
    assert first.body["messages"][0]["content"] == json_prompt(domain)
    assert json.loads(second.messages[-1]["content"])["outcomes"][0]["status"] == "done"
    assert second.messages[-2] == {"role": "assistant", "content": proposal}


# --- the Anthropic Messages API -------------------------------------------------------------------------------


def anthropic_codec() -> AnthropicToolCodec:
    return AnthropicToolCodec.for_domain(TypedNotes())


def test_anthropic_tools_carry_the_input_schema() -> None:
    (first, *_rest) = anthropic_codec().request_fields()["tools"]
    assert set(first) == {"name", "description", "input_schema"} and first["input_schema"]["required"] == ["text"]


def test_anthropic_tool_use_blocks_are_suggestions_and_text_blocks_an_inform() -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "On it."},
            {"type": "tool_use", "id": "toolu_1", "name": "add-note", "input": {"text": "milk"}},
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "ask_user",
                "input": {"question": "More?", "options": []},
            },
        ],
    }
    read = anthropic_codec().read(message, [])
    inform, suggestion, ask = elements(read.dial)
    assert isinstance(inform, Inform) and inform.text == "On it."
    assert (suggestion.id, suggestion.action, suggestion.payload) == ("toolu_1", "add-note", {"text": "milk"})
    assert isinstance(ask, AskElement) and ask.id == "toolu_2"
    assert read.message == message


@pytest.mark.parametrize(
    ("outcome", "words", "error"), [(o, w, o.status not in ("done", "handed-off")) for o, w, _ in STATUSES]
)
def test_every_status_goes_back_as_a_tool_result_block(outcome: Outcome, words: str, error: bool) -> None:
    history = [{"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "a", "input": {}}]}]
    (sent,) = anthropic_codec().incoming(outcome_reply([outcome]) + "\n\nnext", history)
    result, rest = sent["content"]
    assert sent["role"] == "user" and rest == {"type": "text", "text": "next"}
    assert result["type"] == "tool_result" and result["tool_use_id"] == "c"
    assert words in result["content"] and result.get("is_error", False) is error


def test_anthropic_waiting_calls_and_asks_are_answered_in_order() -> None:
    uses = [
        {"type": "tool_use", "id": "c1", "name": "add-note", "input": {}},
        {"type": "tool_use", "id": "q1", "name": "ask_user", "input": {}},
    ]
    (sent,) = anthropic_codec().incoming("work", [{"role": "assistant", "content": uses}])
    waiting, asked, words = sent["content"]
    assert (waiting["tool_use_id"], asked["tool_use_id"]) == ("c1", "q1")
    assert waiting["content"].startswith(WAITING) and asked["content"] == ASKED
    assert words == {"type": "text", "text": "work"}
    assert anthropic_codec().incoming("hello", []) == [{"role": "user", "content": "hello"}]


def test_anthropic_uris(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match="needs the ANTHROPIC_API_KEY environment variable"):
        agent_from_uri("anthropic:claude-sonnet-4-5", domain=TypedNotes())
    local = agent_from_uri("anthropic:qwen@127.0.0.1:9", domain=TypedNotes())
    assert isinstance(local, AnthropicAgent) and isinstance(local.codec, AnthropicToolCodec)
    assert local.base_url == "http://127.0.0.1:9" and local.system_prompt == tools_prompt(TypedNotes())
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    hosted = agent_from_uri("anthropic:claude-sonnet-4-5?codec=dial", domain=TypedNotes())
    assert hosted.base_url == "https://api.anthropic.com" and hosted.codec.name == "dial"
    assert "sk-ant-test" not in repr(hosted)
    with pytest.raises(ValueError, match="the Anthropic API has not"):
        agent_from_uri("anthropic:claude?codec=json", domain=TypedNotes())
    with pytest.raises(ValueError, match="takes no grammar"):
        agent_from_uri("anthropic:claude?codec=dial", domain=TypedNotes(), constrain=True)


def anthropic_agent(server: OpenAIServer, domain: Any, **options: Any) -> ChatAgent:
    base = server.base_url.removesuffix("/v1")
    return AnthropicAgent.for_domain(base, "claude", domain, max_retries=0, **options)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("call", "human", "words", "error"),
    [
        (Call("t1", "add-note", '{"text":"milk"}'), "accept", "Done: Add the note 'milk'.", False),
        (Call("t1", "add-note", '{"text":"milk"}'), {"edit": {"text": "oat"}}, "Done: Add the note 'oat'", False),
        (Call("t1", "add-note", '{"text":"milk"}'), "dismiss", "The user dismissed", True),
        (Call("t1", "fail-note", "{}"), "accept", "Couldn't do it", True),
        (Call("t1", "no-such-tool", "{}"), "accept", "the payload for no-such-tool is invalid", True),
    ],
)
async def test_each_outcome_reaches_an_anthropic_model_as_a_tool_result(
    server: OpenAIServer, streamed: bool, call: Call, human: Any, words: str, error: bool
) -> None:
    server.add(Reply("Adding.", tool_calls=[call], chunks=3), Reply("Noted."), Reply("Nothing more."))
    agent = anthropic_agent(server, TypedNotes(), temperature=0.0, stop=["STOP"])
    async with agent:
        conversation = Conversation(
            agent=agent if streamed else Plain(agent), domain=TypedNotes(), human=scripted_human([human])
        )
        result = await conversation.say("add milk")
        if len(server.requests) == 1:
            await conversation.say("and now?")
    assert [outcome.id for outcome in result.outcomes] == ["t1"]
    first, second = server.requests[:2]
    assert first.path == "/v1/messages" and first.headers["anthropic-version"] == "2023-06-01"
    assert first.body["system"] == tools_prompt(TypedNotes()) and first.body["max_tokens"] == 1024
    assert first.body["stop_sequences"] == ["STOP"] and first.body["tools"][0]["input_schema"]["type"] == "object"
    assistant, told = second.messages[-2:]
    assert assistant["content"][-1]["type"] == "tool_use" and assistant["content"][-1]["id"] == "t1"
    result_block = told["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "t1"
    assert words in result_block["content"] and result_block.get("is_error", False) is error


@pytest.mark.parametrize("api", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("ending", ["cut in the call", "an error event"])
async def test_a_stream_that_breaks_in_a_call_proposes_nothing_and_is_told(
    server: OpenAIServer, api: str, ending: str
) -> None:
    call = Call("c1", "add-note", '{"text": "milk and more"}')
    broken = {"drop_after": 6} if ending == "cut in the call" else {"error_after": 6}
    server.add(Reply("Adding it.", tool_calls=[call], chunks=4, **broken), Reply("Sorry."))
    domain = TypedNotes()
    agents = {"openai": tools_agent, "anthropic": anthropic_agent, "responses": responses_agent}
    agent = agents[api](server, domain)
    async with agent:
        conversation = Conversation(agent=agent, domain=domain, human=policy_human("accept"))
        result = await conversation.say("add milk")
    assert result.outcomes == () and domain.ran == []
    (cut,) = [event for event in events(conversation) if isinstance(event, ReplyCutEvent)]
    assert cut.cause == "broken"
    if ending == "an error event":
        assert "scripted" in (cut.error or "")
    told = server.requests[1].body.get("messages", server.requests[1].body.get("input"))[-1]
    text = told["content"] if isinstance(told["content"], str) else told["content"][-1]["text"]
    assert "could not be used" in text


# --- what the model says and what happened ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replies", "flagged"),
    [
        (['Sure! I\'ve added "buy milk" to your notes.'], True),
        (["<dial><dial-inform>Your note has been added.</dial-inform></dial>"], True),
        (["I can add it if you like."], False),
        (
            [
                '<dial><dial-suggest action="add-note"><dial-payload>{"text":"milk"}</dial-payload>'
                "</dial-suggest></dial>",
                "<dial><dial-inform>I've added it.</dial-inform></dial>",
            ],
            False,
        ),
    ],
)
async def test_words_that_claim_an_effect_nothing_ran_for_are_not_confirmed(
    replies: list[str], flagged: bool
) -> None:
    """A reply that says something was done in a call where nothing ran is shown as the agent's claim, not
    confirmed, and the agent is told; once an action ran in the call, the same words stand."""
    agent = RecordingAgent([*replies, "ok"])
    conversation = Conversation(agent=agent, domain=TypedNotes(), human=policy_human("accept"))
    await conversation.say("add milk")
    said = [item for item in project(conversation.log).items if isinstance(item, AgentText)]
    assert (said[-1].unconfirmed == UNRAN_CLAIM) is flagged
    if flagged:
        await conversation.say("did it work?")
        assert UNRAN_CLAIM in agent.seen[-1]


async def test_a_tool_call_said_to_be_done_before_its_result_is_not_confirmed(server: OpenAIServer) -> None:
    server.add(
        Reply("I've added it to your notes.", tool_calls=[Call("c1", "add-note", '{"text":"milk"}')]),
        Reply("It is in your notes now."),
    )
    async with tools_agent(server, TypedNotes()) as agent:
        conversation = Conversation(agent=agent, domain=TypedNotes(), human=policy_human("accept"))
        result = await conversation.say("add milk")
    assert [outcome.status for outcome in result.outcomes] == ["done"]
    first = next(item for item in project(conversation.log).items if isinstance(item, AgentText))
    assert first.text == "I've added it to your notes." and first.unconfirmed == UNRAN_CLAIM


# --- the OpenAI Responses API ---------------------------------------------------------------------------------


def test_the_responses_api_carries_the_tools_flat_and_the_schema_as_text_format() -> None:
    tools = codec_for("tools", TypedNotes(), strict=True, api="openai-responses").request_fields()["tools"]
    assert tools[0] == {
        "type": "function",
        "name": "add-note",
        "description": tools[0]["description"],
        "parameters": TypedNotes.vocabulary["add-note"]["schema"],
        "strict": True,
    }
    (formatted,) = codec_for("json", TypedNotes(), api="openai-responses").request_fields().values()
    assert formatted["format"]["type"] == "json_schema" and formatted["format"]["schema"] == reply_schema(
        TypedNotes()
    )
    assert codec_for("dial", api="openai-responses").request_fields() == {}
    with pytest.raises(ValueError, match="unknown API 'openai-chats'"):
        codec_for("dial", api="openai-chats")


def test_chat_messages_become_input_items_keyed_by_call_id() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "add-note", "arguments": '{"text":"a"}'}}]
    messages = [
        {"role": "user", "content": "add a"},
        {"role": "assistant", "content": "Adding.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "Done: Add it."},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "user", "content": ""},
    ]
    assert responses_input(messages) == [
        {"type": "message", "role": "user", "content": "add a"},
        {"type": "message", "role": "assistant", "content": "Adding."},
        {"type": "function_call", "call_id": "c1", "name": "add-note", "arguments": '{"text":"a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Done: Add it."},
        {"type": "function_call", "call_id": "c1", "name": "add-note", "arguments": '{"text":"a"}'},
        {"type": "message", "role": "user", "content": ""},
    ]


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ([], {"role": "assistant", "content": None}),
        (
            [
                {
                    "type": "message",
                    "content": [{"type": "output_text", "text": "Hi "}, {"type": "refusal", "refusal": "no"}],
                }
            ],
            {"role": "assistant", "content": "Hi no"},
        ),
        (
            [
                {"type": "reasoning", "summary": []},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "c9",
                    "name": "add-note",
                    "arguments": {"text": "b"},
                },
            ],
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c9", "type": "function", "function": {"name": "add-note", "arguments": '{"text":"b"}'}}
                ],
            },
        ),
    ],
    ids=["nothing", "text and a refusal", "a call after reasoning"],
)
def test_output_items_are_read_as_the_chat_message_they_make(output: list[Any], expected: dict[str, Any]) -> None:
    assert chat_message({"output": output}) == expected


def responses_agent(server: OpenAIServer, domain: Any, **options: Any) -> ChatAgent:
    options.setdefault("codec", "tools")
    return ResponsesAgent.for_domain(server.base_url, "m", domain, max_retries=0, **options)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("call", "human", "words"),
    CALL_OUTCOMES,
)
async def test_each_outcome_reaches_a_responses_model_as_the_calls_output(
    server: OpenAIServer, streamed: bool, call: Call, human: Any, words: str
) -> None:
    server.add(Reply("Adding.", tool_calls=[call], chunks=3), Reply("Noted."), Reply("Nothing more."))
    agent = responses_agent(server, TypedNotes(), temperature=0.0, seed=1, max_tokens=99)
    async with agent:
        conversation = Conversation(
            agent=agent if streamed else Plain(agent), domain=TypedNotes(), human=scripted_human([human])
        )
        result = await conversation.say("add milk")
        if len(server.requests) == 1:
            await conversation.say("and now?")
    assert [outcome.id for outcome in result.outcomes] == ["c1"]
    first, second = server.requests[:2]
    assert first.path == "/v1/responses" and first.body["store"] is False
    assert first.body["instructions"] == tools_prompt(TypedNotes()) and first.body["max_output_tokens"] == 99
    assert "seed" not in first.body and "messages" not in first.body
    assert first.body["tools"][0]["name"] == "add-note" and first.body["input"] == [
        {"type": "message", "role": "user", "content": "add milk"}
    ]
    (output,) = [item for item in second.body["input"] if item["type"] == "function_call_output"]
    made = second.body["input"][second.body["input"].index(output) - 1]
    assert made["type"] == "function_call" and made["call_id"] == output["call_id"] == "c1"
    assert words in output["output"]
    assert json.loads(output["output"].partition("\n")[2])["status"] == result.outcomes[0].status


async def test_parallel_responses_calls_are_suggestions_of_one_reply(server: OpenAIServer) -> None:
    calls = [Call("c1", "add-note", '{"text":"a"}'), Call("c2", "add-note", '{"text":"b"}')]
    server.add(Reply("", tool_calls=calls, chunks=4), Reply("Both handled."))
    domain = TypedNotes()
    async with responses_agent(server, domain) as agent:
        conversation = Conversation(agent=agent, domain=domain, human=scripted_human(["accept", "dismiss"]))
        result = await conversation.say("add a and b")
    assert [(o.id, o.status) for o in result.outcomes] == [("c1", "done"), ("c2", "dismissed")]
    assert [(item["type"], item["call_id"]) for item in server.requests[1].body["input"][-4:]] == [
        ("function_call", "c1"),
        ("function_call", "c2"),
        ("function_call_output", "c1"),
        ("function_call_output", "c2"),
    ]


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_responses_conversations_log_keeps_the_output_items_and_takes_the_agent_up(
    server: OpenAIServer, streamed: bool
) -> None:
    server.add(Reply("Adding.", tool_calls=[Call("c1", "add-note", '{"text":"milk"}')], chunks=3), Reply("Done."))
    async with responses_agent(server, TypedNotes()) as agent:
        conversation = Conversation(
            agent=agent if streamed else Plain(agent), domain=TypedNotes(), human=policy_human("accept")
        )
        await conversation.say("add milk")
    replies = [event for event in events(conversation) if isinstance(event, ReplyEvent)]
    provider = replies[0].provider
    assert provider is not None and provider.api == "openai-responses"
    assert [item["type"] for item in provider.message["output"]] == ["message", "function_call"]
    assert provider.message["output"][1]["call_id"] == "c1"
    assert replay(conversation.log, domain=TypedNotes()).ok
    taken_up = history_from_log(conversation.log, agent.codec)
    assert responses_input([message.wire() for message in taken_up]) == [
        *server.requests[1].body["input"],
        {"type": "message", "role": "assistant", "content": "Done."},
    ]


async def test_a_response_cut_at_its_token_limit_proposes_nothing(server: OpenAIServer) -> None:
    call = Call("c1", "add-note", '{"text":"milk"}')
    server.add(Reply("Adding.", tool_calls=[call], finish_reason="length"), Reply("Sorry."))
    domain = TypedNotes()
    async with responses_agent(server, domain) as agent:
        conversation = Conversation(agent=agent, domain=domain, human=policy_human("accept"))
        result = await conversation.say("add milk")
    assert result.outcomes == () and domain.ran == []
    (cut,) = [event for event in events(conversation) if isinstance(event, ReplyCutEvent)]
    assert cut.cause == "token-limit"


async def test_a_whole_response_at_its_token_limit_is_not_taken(server: OpenAIServer) -> None:
    server.add(Reply("Adding.", finish_reason="length"), Reply("Sorry."))
    async with responses_agent(server, TypedNotes()) as agent:
        with pytest.raises(TokenLimitReached, match="max_output_tokens"):
            await agent.send("add milk")
        assert agent.history == ()
        assert "Sorry." in str(await agent.send("add milk"))


@pytest.mark.parametrize(
    ("uri", "options", "kind", "says"),
    [
        ("openai:gpt-5?api=responses", {}, "ResponsesAgent", "tools"),
        ("openai:gpt-5?api=responses&codec=json", {}, "ResponsesAgent", "json"),
        ("llamacpp:qwen?api=responses", {}, "ResponsesAgent", "dial"),
        ("llamacpp:qwen?api=chat&codec=tools", {}, "ChatAgent", "tools"),
        ("anthropic:claude?api=responses", {}, None, "anthropic: speaks the Messages API"),
        ("openai:gpt-5?api=assistants", {}, None, "unknown api 'assistants'; use one of chat, responses"),
        ("openai:gpt-5?api=responses&stop=X", {}, None, "takes no stop sequences"),
        ("llamacpp:qwen?api=responses", {"constrain": True}, None, "the openai-responses API takes no grammar"),
    ],
)
def test_a_uri_names_the_responses_api(
    monkeypatch: pytest.MonkeyPatch, uri: str, options: dict[str, Any], kind: str | None, says: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    if kind is None:
        with pytest.raises(ValueError, match=re.escape(says)):
            agent_from_uri(uri, domain=TypedNotes(), **options)
        return
    agent = agent_from_uri(uri, domain=TypedNotes(), **options)
    assert type(agent).__name__ == kind and agent.codec.name == says  # type: ignore[union-attr]
    assert agent.grammar is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("codec", "text"), [("tools", '{"name": "add-note", "arguments": {"te'), ("json", '{"acts": [')]
)
async def test_words_held_back_and_cut_at_the_token_limit_are_a_cut_reply(
    server: OpenAIServer, codec: str, text: str
) -> None:
    """A model that runs past its token limit in text a codec holds back (what may yet be calls, or a JSON reply)
    gives a cut reply, as a DIAL reply cut there does: the person sees the words, the agent is told to be
    shorter, and the conversation goes on; it is not a failed send."""
    server.add(Reply(text + " and so on" * 20, chunks=5, finish_reason="length"), Reply("Short now."))
    domain = TypedNotes()
    async with agent_from_uri(f"{server.base_url}?codec={codec}#m", domain=domain, max_retries=0) as agent:  # type: ignore[union-attr]
        conversation = Conversation(agent=agent, domain=domain, human=policy_human("accept"))
        result = await conversation.say("add milk")
    assert result.status == "idle" and domain.ran == []
    kinds = [event.type for event in events(conversation)]
    assert "send-failed" not in kinds
    (cut,) = [event for event in events(conversation) if isinstance(event, ReplyCutEvent)]
    assert cut.cause == "token-limit"
    assert "token limit" in server.requests[1].messages[-1]["content"]


# --- a conversation recorded with another codec ---------------------------------------------------------------

RECORDED = (
    "<dial>\n  <dial-inform>Two things.</dial-inform>\n"
    '  <dial-suggest action="add-note">Add it<dial-payload>{"text":"a"}</dial-payload></dial-suggest>\n'
    '  <dial-suggest id="mine" action="add-note"><dial-payload>{"text":"b"}</dial-payload></dial-suggest>\n'
    '  <dial-ask response-type="choice">Which list?<dial-option value="home">home</dial-option></dial-ask>\n'
    "</dial>"
)


def test_a_recorded_dial_reply_is_what_each_codec_would_have_had_the_model_write() -> None:
    """The informs are the text; the suggestions and asks are the calls, as the runtime read them (its ids, a
    payload a declare gave), in the reply's order."""
    domain = TypedNotes()
    called = [
        Called(id="ask-1", element=3, text="Which list?", options=(Option(value="home", label="home"),)),
        Called(id="sg-1", element=1, action="add-note", payload={"text": "a"}, text="Add it"),
        Called(id="mine", element=2, action="add-note", payload={"text": "b"}),
    ]
    calls = [("sg-1", "add-note", '{"text":"a"}'), ("mine", "add-note", '{"text":"b"}')]
    ask = ("ask-1", "ask_user", '{"question":"Which list?","options":["home"]}')
    chat = {
        "role": "assistant",
        "content": "Two things.",
        "tool_calls": [
            {"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}}
            for ident, name, arguments in [*calls, ask]
        ],
    }
    assert codec_for("tools", domain).spoken(RECORDED, called) == chat
    assert codec_for("tools", domain, api="openai-responses").spoken(RECORDED, called) == chat
    assert codec_for("dial").spoken(RECORDED, called) == {"role": "assistant", "content": RECORDED}
    blocks = codec_for("tools", domain, api="anthropic-messages").spoken(RECORDED, called)["content"]
    assert blocks[0] == {"type": "text", "text": "Two things."}
    assert [(block["id"], block["input"]) for block in blocks[1:]] == [
        ("sg-1", {"text": "a"}),
        ("mine", {"text": "b"}),
        ("ask-1", {"question": "Which list?", "options": ["home"]}),
    ]
    acts = json.loads(codec_for("json", domain).spoken(RECORDED, called)["content"])["acts"]
    assert acts == [
        {"act": "inform", "text": "Two things."},
        {"act": "suggest", "action": "add-note", "text": "Add it", "payload": {"text": "a"}},
        {"act": "suggest", "action": "add-note", "text": "", "payload": {"text": "b"}},
        {"act": "ask", "question": "Which list?", "options": ["home"]},
    ]
    assert codec_for("tools", domain).spoken("Just words.", []) == {"role": "assistant", "content": "Just words."}
    cut = codec_for("tools", domain).spoken("<dial><dial-inform>Half", called[1:2])
    assert cut == {"role": "assistant", "content": "Half", "tool_calls": chat["tool_calls"][:1]}


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("codec_name", ["tools", "json"])
async def test_a_dial_conversation_is_taken_up_by_a_codec_as_its_own_calls(
    codec_name: str, streamed: bool
) -> None:
    """A conversation held in DIAL, taken up (or replayed counterfactually) by a model speaking another codec:
    each suggestion is a call of that model's whose outcome answers it by the runtime's id (read from the log
    whether the suggestion was proposed as the reply streamed or once it was whole)."""
    suggest = (  # the payload in a declare, as the primer also teaches
        '<dial><dial-suggest action="add-note">Add it</dial-suggest>'
        '<dial-declare context-key="add-note">{"text":"milk"}</dial-declare></dial>'
    )
    replies = [suggest, "<dial><dial-inform>Added.</dial-inform></dial>"]
    agent = StreamingAgent(replies, size=9) if streamed else RecordingAgent(replies)
    conversation = Conversation(agent=agent, domain=TypedNotes(), human=policy_human("accept"))
    await conversation.say("add milk")
    codec = codec_for(codec_name, TypedNotes())
    history = [message.wire() for message in history_from_log(conversation.log, codec)]
    if codec_name == "tools":
        assert history[1]["tool_calls"][0]["id"] == "sg-1"
        assert history[2]["role"] == "tool" and history[2]["tool_call_id"] == "sg-1"
        assert history[2]["content"].startswith("Done: Add the note 'milk'")
    else:
        assert json.loads(history[1]["content"])["acts"][0]["payload"] == {"text": "milk"}
        assert json.loads(history[2]["content"])["outcomes"][0]["id"] == "sg-1"
    assert history[-1] == codec.spoken("<dial><dial-inform>Added.</dial-inform></dial>", [])


async def test_a_model_message_of_another_codec_is_not_read_as_this_ones(server: OpenAIServer) -> None:
    server.add(Reply("", tool_calls=[Call("c1", "add-note", '{"text":"milk"}')]), Reply("Done."))
    async with tools_agent(server, TypedNotes()) as agent:
        conversation = Conversation(agent=agent, domain=TypedNotes(), human=policy_human("accept"))
        await conversation.say("add milk")
    structured = codec_for("json", TypedNotes())
    history = [message.wire() for message in history_from_log(conversation.log, structured)]
    assert json.loads(history[1]["content"])["acts"][0]["action"] == "add-note"
    assert json.loads(history[2]["content"])["outcomes"][0]["id"] == "c1"
