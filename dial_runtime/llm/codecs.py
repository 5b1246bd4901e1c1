"""Codecs: how the runtime's DIAL is spoken to a model, and how the model's answer is read back as DIAL.

The runtime speaks DIAL whatever the model: its messages to the agent are DIAL (outcomes, refusals, the domain's
context, the person's words) and it reads a DIAL reply. A codec sits between that and a model's API, without I/O:

- :class:`DialCodec` (``"dial"``) sends the messages as they are and reads the model's text as the reply: the
  model writes DIAL itself (with :func:`~dial_runtime.llm.grammar.domain_grammar` on a local server);
- :class:`ToolCallCodec` (``"tools"``) speaks the OpenAI Chat Completions tool-call protocol: each action of the
  domain is a tool, with the payload's JSON Schema from the domain's vocabulary, and ``ask_user`` asks the
  person. Each tool call the model makes is one suggestion (its call id is the suggestion's id), the model's text
  is an inform, and a reply without a call ends the model's turn. Each outcome goes back as the ``tool`` message
  of its call, which is the channel the model was trained to read;
- :class:`AnthropicToolCodec` is the same on the Anthropic Messages API (``tool_use`` and ``tool_result`` blocks);
- :class:`StructuredCodec` (``"json"``) has each reply be one JSON object of acts, which the server's structured
  output decodes to the reply's schema (:func:`reply_schema`);
- :class:`OnResponses` speaks any of the three on the OpenAI Responses API (input and output items instead of
  chat messages, ``function_call`` and ``function_call_output`` items instead of tool calls and ``tool``
  messages): the history stays in the chat form, and only the wire changes.

A codec reads a message to the agent with :meth:`~ToolCallCodec.incoming`, which returns the API's messages that
carry it, and a model's message with :meth:`~ToolCallCodec.read`, which returns the DIAL reply and the message as
it joins the history. The log keeps both the DIAL reply the runtime handled and the model's own message
(:class:`~dial_runtime.ports.ProviderMessage`), so a conversation is taken up, replayed and audited alike whatever
the codec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from ..language.outcomes import Reported, Reports, compact_json, escape_attribute, escape_text, read_reports
from ..language.parser import parse
from ..language.records import Inform
from ..views.agent import Called

__all__ = [
    "APIS",
    "CODECS",
    "AnthropicToolCodec",
    "Codec",
    "DialCodec",
    "Live",
    "OnResponses",
    "Read",
    "SpokenActs",
    "SpokenCall",
    "StructuredCodec",
    "Tool",
    "ToolCallCodec",
    "chat_message",
    "codec_for",
    "domain_tools",
    "reply_schema",
    "responses_input",
    "spoken_acts",
    "tool_result",
]

#: The codecs a :class:`~dial_runtime.llm.ChatAgent` speaks, by name.
CODECS: Final = ("dial", "tools", "json")
#: The APIs a codec is made for, by the name the log gives a model's own messages
#: (:class:`~dial_runtime.ports.ProviderMessage`).
APIS: Final = ("openai-chat", "openai-responses", "anthropic-messages")

#: A tool's name as the OpenAI API takes it.
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ASK_TOOL: Final = "ask_user"
# How a model writes calls as text: in a Markdown fence or not, each in <tool_call> tags or not.
_DECODER: Final = json.JSONDecoder()
_CALLS_START: Final = ("{", "[", "<tool_call>", "```")
_FENCED: Final = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
_OPENING_TAG: Final = re.compile(r"\s*(?:<tool_call>)?\s*")
_CLOSING_TAG: Final = re.compile(r"\s*(?:</tool_call>)?\s*")

_WAITING: Final = (
    "No decision yet: this is waiting for the person, and did not run. Its outcome will be sent when they decide."
)
_ASKED: Final = "The question was put to the person; their answer is in the next message."


class Read(msgspec.Struct, frozen=True, kw_only=True):
    """A model's message read by a codec: the reply as DIAL (``dial``), and the message as it joins the chat
    history (``message``: the API's form, with an id for each tool call)."""

    dial: str
    message: dict[str, Any]


class Codec(Protocol):
    """How a :class:`~dial_runtime.llm.ChatAgent` speaks to its model (see the module docstring)."""

    #: The codec's name, one of :data:`CODECS`.
    name: str
    #: The API whose messages it reads (one of :data:`APIS`; ``""`` for DIAL, which reads text on any).
    api: str

    def request_fields(self) -> dict[str, Any]:
        """The fields this codec adds to every request body (the tools, a response format)."""
        ...

    def incoming(self, message: str, history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The API's messages that carry the runtime's ``message``, after ``history``."""
        ...

    def read(self, message: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> Read:
        """The model's ``message`` (the API's assistant message, answering after ``history``) as a DIAL reply."""
        ...

    def live(self) -> Live:
        """What turns a streamed message's text, as it arrives, into the start of its DIAL reply."""
        ...

    def spoken(self, dial: str, called: Sequence[Called]) -> dict[str, Any]:
        """The message the model would have written, speaking this codec, for the recorded DIAL reply ``dial``,
        whose suggestions and asks the runtime read as ``called`` (an exchange's, :mod:`dial_runtime.views.agent`):
        how a conversation recorded with another codec (no model message of this codec's on its log) joins the
        history, each suggestion a call its outcome answers."""
        ...


class Live(Protocol):
    """A streamed reply as DIAL while it arrives: :meth:`feed` takes the model's next piece of text and returns
    what of the DIAL reply may be given now; :meth:`finish` takes the whole reply (:attr:`Read.dial`) once the
    message is complete and returns the rest of it. What ``feed`` gave, then what ``finish`` gives, is the
    reply. A message cut at the model's token limit is never whole: :meth:`cut` gives what of the model's text
    (all of it, ``text``) was held back, as the start of an inform, so the reply is a cut one (the agent is told
    to be shorter) whatever the codec, as a DIAL reply cut there is."""

    def feed(self, text: str) -> str: ...

    def finish(self, dial: str) -> str: ...

    def cut(self, text: str) -> str: ...


class _AsItComes:
    """The DIAL codec's live reply: the model's text is the reply."""

    def feed(self, text: str) -> str:
        return text

    def finish(self, dial: str) -> str:
        return ""

    def cut(self, text: str) -> str:
        return ""


class _LiveInform:
    """The tool-call codec's live reply: the model's words stream as the body of the reply's first inform, once
    they cannot be calls written as text (see :class:`ToolCallCodec`); the calls come with :meth:`finish`."""

    _MAYBE_CALLS = ("{", "[", "<", "`")

    def __init__(self) -> None:
        self.held: list[str] = []
        self.given: list[str] = []
        self.open = False

    def feed(self, text: str) -> str:
        if not text:
            return ""
        if self.open:
            return self._give(escape_text(text))
        self.held.append(text)
        so_far = "".join(self.held).lstrip()
        if not so_far or so_far.startswith(self._MAYBE_CALLS):
            return ""
        self.open = True
        return self._give(f"<dial>\n  <dial-inform>{escape_text(''.join(self.held))}")

    def _give(self, text: str) -> str:
        self.given.append(text)
        return text

    def cut(self, text: str) -> str:
        if self.open or not text.strip():
            return ""
        self.open = True
        return self._give(f"<dial>\n  <dial-inform>{escape_text(text)}")

    def finish(self, dial: str) -> str:
        given = "".join(self.given)
        if not dial.startswith(given):  # cannot happen: the inform's escaped text is the start of the reply
            raise AssertionError("the streamed start of a reply is not the start of the reply")
        return dial[len(given) :]


class DialCodec:
    """The model reads and writes DIAL: each message is a user message, each reply the assistant's text."""

    name = "dial"
    api = ""

    def request_fields(self) -> dict[str, Any]:
        return {}

    def incoming(self, message: str, history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": message}]

    def read(self, message: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> Read:
        text = _text(message.get("content"))
        return Read(dial=text, message={"role": "assistant", "content": text})

    def live(self) -> Live:
        return _AsItComes()

    def spoken(self, dial: str, called: Sequence[Called]) -> dict[str, Any]:
        return {"role": "assistant", "content": dial}


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    """One tool the model may call: ``name`` (as the API takes it), the ``action`` it proposes (``None`` for the
    tool that asks the person), what it does, and its arguments' JSON Schema."""

    name: str
    action: str | None
    description: str
    parameters: dict[str, Any]


_ASK_PARAMETERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "The question, in the person's language."},
        "options": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The answers to choose from; leave it empty for a free answer.",
        },
    },
    "required": ["question", "options"],
    "additionalProperties": False,
}

_ANY_OBJECT: Final[dict[str, Any]] = {"type": "object"}


def domain_tools(domain: Any) -> tuple[Tool, ...]:
    """The tools of ``domain``: one per action, in its order (the description says when an action changes
    something, and when it cannot be undone), then ``ask_user``.

    An action's name that the API would refuse as a tool name (more than 64 characters, or a character other
    than letters, digits, ``_`` and ``-``) is written with ``_`` for each such character, made unique with a
    number; the codec maps it back.
    """
    from ..agents.prompt import vocabulary  # prompt imports the runtime's records; keep this import light

    tools: list[Tool] = []
    taken: set[str] = set()
    for entry in vocabulary(domain):
        name = _unique(_tool_name(entry.name), taken)
        marks = []
        if entry.spec.destructive:
            marks.append("It cannot be undone.")
        elif entry.spec.mutates:
            marks.append("It changes something.")
        else:
            marks.append("It only reads.")
        marks.append("The person sees it and decides before it runs.")
        description = " ".join([entry.description or f"Propose the action {entry.name}.", *marks])
        schema = entry.schema if isinstance(entry.schema, Mapping) else _ANY_OBJECT
        tools.append(Tool(name=name, action=entry.name, description=description, parameters=dict(schema)))
    ask = _unique(_ASK_TOOL, taken)
    tools.append(
        Tool(
            name=ask,
            action=None,
            description="Ask the person a question when you need their answer to go on.",
            parameters=_ASK_PARAMETERS,
        )
    )
    return tuple(tools)


def _tool_name(action: str) -> str:
    if _TOOL_NAME.fullmatch(action):
        return action
    return re.sub(r"[^A-Za-z0-9_-]", "_", action)[:60] or "action"


def _unique(name: str, taken: set[str]) -> str:
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name[:60]}_{number}"
    taken.add(candidate)
    return candidate


class ToolCallCodec:
    """The OpenAI Chat Completions tool-call protocol (see the module docstring).

    ``strict`` marks each tool's schema ``strict`` (servers that enforce it decode the arguments to the schema;
    the OpenAI API then requires every schema to be closed, which a domain's typed actions are).

    A model that writes its calls as text instead of making them (small local models often answer with the
    JSON object ``{"name": ..., "arguments": {...}}``, in ``<tool_call>`` tags or not, as their chat template
    shows them) has them read as calls when the whole text is such calls to known tools: the same thing the
    servers' own parsers do for the tags their templates name.
    """

    name = "tools"
    api = "openai-chat"

    def __init__(self, tools: Sequence[Tool], *, strict: bool = False) -> None:
        self.tools = tuple(tools)
        self.strict = strict
        self._by_name = {tool.name: tool for tool in self.tools}
        # Each action's tool, and ask_user under the name recorded acts give asks.
        self._tool_names = {tool.action or _ASK_TOOL: tool.name for tool in self.tools}
        self._fields = {"tools": [self._written(tool) for tool in self.tools]}

    @classmethod
    def for_domain(cls, domain: Any, *, strict: bool = False) -> ToolCallCodec:
        """The codec for ``domain``'s actions (:func:`domain_tools`)."""
        return cls(domain_tools(domain), strict=strict)

    def request_fields(self) -> dict[str, Any]:
        return self._fields

    def _written(self, tool: Tool) -> dict[str, Any]:
        """A tool as the request names it."""
        function: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        if self.strict:
            function["strict"] = True
        return {"type": "function", "function": function}

    # --- to the model --------------------------------------------------------------------------------------

    def incoming(self, message: str, history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """A ``tool`` message for each call of the last assistant message still without one (the outcome, or
        that the person has not decided yet), then a user message with the rest: outcomes of calls answered
        before, notices about the model's replies, the domain's context and the person's words."""
        reports = read_reports(message)
        pending = _unanswered(history)
        if not (pending or reports.outcomes or reports.notices):  # the person's words, the usual first message
            return [{"role": "user", "content": reports.rest}]
        outcomes = {reported.id: reported for reported in reports.outcomes}
        messages: list[dict[str, Any]] = []
        for call in pending:
            ident = call.get("id", "")
            reported = outcomes.pop(ident, None)
            if reported is not None:
                content = f"{reported.acknowledgement}\n{reported.body}"
            else:
                tool = self._tool(call)
                content = _ASKED if tool is not None and tool.action is None else _WAITING
            messages.append({"role": "tool", "tool_call_id": ident, "content": content})
        said = _said(outcomes.values(), reports)
        if said or not messages:
            messages.append({"role": "user", "content": "\n\n".join(said)})
        return messages

    def live(self) -> Live:
        return _LiveInform()

    def spoken(self, dial: str, called: Sequence[Called]) -> dict[str, Any]:
        """A recorded DIAL reply as this codec's message: its informs the text, each suggestion a call of its
        action's tool (its id the runtime's), each ask an ``ask_user`` call."""
        acts = spoken_acts(dial, called)
        calls = [
            {
                "id": act.id,
                "type": "function",
                "function": {"name": self._tool_names.get(act.name, act.name), "arguments": act.arguments},
            }
            for act in acts.calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": acts.text or None}
        if calls:
            message["tool_calls"] = calls
        return message

    def _tool(self, call: Mapping[str, Any]) -> Tool | None:
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return self._by_name.get(name) if isinstance(name, str) else None

    # --- from the model ------------------------------------------------------------------------------------

    def read(self, message: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> Read:
        """The model's message as DIAL: its text an inform, each tool call a suggestion (``ask_user`` an ask),
        in the order made; the message as it joins the history, each call with an id (one the model left out is
        made from the count of assistant messages before it and the call's place)."""
        text = _text(message.get("content"))
        raw_calls = message.get("tool_calls")
        calls: list[dict[str, Any]] = []
        if raw_calls and isinstance(raw_calls, (list, tuple)):
            calls = [call for call in raw_calls if isinstance(call, dict)]
        dial, text, kept = self._translated(text, calls, history)
        if not kept:
            return Read(dial=dial, message={"role": "assistant", "content": text or None})
        return Read(dial=dial, message={"role": "assistant", "content": text or None, "tool_calls": kept})

    def _translated(
        self, text: str, calls: list[dict[str, Any]], history: Sequence[Mapping[str, Any]]
    ) -> tuple[str, str, list[dict[str, Any]]]:
        """A reply's text and calls (the OpenAI form) as DIAL; the text left once calls written in it are read,
        and the calls as they join the history, each with an id."""
        if not calls:
            written = self._written_calls(text) if text else []
            if not written:  # words only, the usual last reply of a turn
                dial = f"<dial>\n  <dial-inform>{escape_text(text)}</dial-inform>\n</dial>" if text else ""
                return dial, text, []
            calls, text = written, ""
        kept: list[dict[str, Any]] = []
        elements = [f"<dial>\n  <dial-inform>{escape_text(text)}</dial-inform>" if text else "<dial>"]
        for place, call in enumerate(calls, 1):
            given = call.get("function")
            function: dict[str, Any] = given if isinstance(given, dict) else {}
            ident = call.get("id")
            if not (isinstance(ident, str) and ident):
                turn = sum(1 for earlier in history if earlier.get("role") == "assistant") + 1
                ident = f"call-{turn}-{place}"
            name = str(function.get("name") or "")
            arguments = _arguments_text(function.get("arguments"))
            kept.append({"id": ident, "type": "function", "function": {"name": name, "arguments": arguments}})
            elements.append(self._element(ident, name, arguments))
        elements.append("</dial>")
        return "\n".join(elements), text, kept

    def _written_calls(self, text: str) -> list[dict[str, Any]]:
        """The calls a model wrote as text, when the whole text is calls to known tools; else none."""
        body = text.strip()
        if not body.startswith(_CALLS_START):  # most text: words, not calls
            return []
        fenced = _FENCED.fullmatch(body)
        if fenced:
            body = fenced.group(1)
        calls: list[dict[str, Any]] = []
        at = 0
        while at < len(body):
            at = _skip(_OPENING_TAG, body, at)
            if at >= len(body):
                break
            try:
                value, at = _DECODER.raw_decode(body, at)
            except ValueError:
                return []
            at = _skip(_CLOSING_TAG, body, at)
            for item in value if isinstance(value, list) else [value]:
                if not (isinstance(item, dict) and set(item) == {"name", "arguments"}):
                    return []
                if item["name"] not in self._by_name:
                    return []
                calls.append({"function": {"name": item["name"], "arguments": item["arguments"]}})
        return calls

    def _element(self, call_id: str, name: str, arguments: str) -> str:
        """One call as a DIAL element: an ask for ``ask_user``, else a suggestion of the tool's action (a tool
        the codec does not know is proposed under its own name, which the runtime refuses as unknown)."""
        ident = escape_attribute(call_id)
        tool = self._by_name.get(name)
        if tool is not None and tool.action is None:
            return _ask(ident, arguments)
        action = escape_attribute(name if tool is None else tool.action or "")
        return (
            f'  <dial-suggest id="{ident}" action="{action}">'
            f'<dial-payload type="application/json">{escape_text(arguments)}</dial-payload></dial-suggest>'
        )


#: The outcomes that tell a model its call did not do what it asked: a ``tool_result`` with ``is_error``.
_NOT_DONE: Final = frozenset({"failed", "invalid", "dismissed", "superseded"})


class AnthropicToolCodec(ToolCallCodec):
    """The tool-call codec on the Anthropic Messages API: each action a tool (``input_schema``: the payload's
    schema), each ``tool_use`` block one suggestion whose id is the block's, the text blocks an inform; each
    outcome the ``tool_result`` block of its call, ``is_error`` when the call did not do what it asked (failed,
    invalid, dismissed, expired or superseded), the acknowledgement and the outcome's JSON as its text. An edit is
    a result that says what ran (the preview of the payload that ran, and ``edited``). The tool results come first
    in the user message that follows the calls, as the API requires, then the rest as a text block."""

    api = "anthropic-messages"

    def __init__(self, tools: Sequence[Tool]) -> None:
        super().__init__(tools)
        self._fields = {
            "tools": [
                {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
                for tool in self.tools
            ]
        }

    @classmethod
    def for_domain(cls, domain: Any, *, strict: bool = False) -> AnthropicToolCodec:
        """The codec for ``domain``'s actions (:func:`domain_tools`); ``strict`` is the OpenAI API's, unused."""
        return cls(domain_tools(domain))

    def incoming(self, message: str, history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        reports = read_reports(message)
        pending = _unanswered_uses(history)
        if not (pending or reports.outcomes or reports.notices):
            return [{"role": "user", "content": reports.rest}]
        outcomes = {reported.id: reported for reported in reports.outcomes}
        blocks: list[dict[str, Any]] = []
        for use in pending:
            ident = use.get("id", "")
            reported = outcomes.pop(ident, None)
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": ident}
            if reported is not None:
                result["content"] = f"{reported.acknowledgement}\n{reported.body}"
                if reported.status in _NOT_DONE:  # an expired suggestion is dismissed
                    result["is_error"] = True
            else:
                tool = self._by_name.get(use.get("name", ""))
                result["content"] = _ASKED if tool is not None and tool.action is None else _WAITING
            blocks.append(result)
        said = _said(outcomes.values(), reports)
        if said:
            blocks.append({"type": "text", "text": "\n\n".join(said)})
        return [{"role": "user", "content": blocks}]

    def read(self, message: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> Read:
        """The model's message as DIAL: its text blocks an inform, each ``tool_use`` block a suggestion
        (``ask_user`` an ask); the message as it joins the history, each call with an id."""
        content = message.get("content")
        blocks = [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []
        text = content if isinstance(content, str) else _text(blocks)
        calls = [
            {"id": block.get("id"), "function": {"name": block.get("name"), "arguments": block.get("input")}}
            for block in blocks
            if block.get("type") == "tool_use"
        ]
        dial, text, kept = self._translated(text, calls, history)
        written: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call in kept:
            function = call["function"]
            try:
                given = json.loads(function["arguments"])
            except ValueError:
                given = function["arguments"]
            written.append({"type": "tool_use", "id": call["id"], "name": function["name"], "input": given})
        return Read(dial=dial, message={"role": "assistant", "content": written})

    def spoken(self, dial: str, called: Sequence[Called]) -> dict[str, Any]:
        """A recorded DIAL reply as this codec's message: a text block, then a ``tool_use`` block per call."""
        acts = spoken_acts(dial, called)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": acts.text}] if acts.text else []
        for act in acts.calls:
            name = self._tool_names.get(act.name, act.name)
            blocks.append({"type": "tool_use", "id": act.id, "name": name, "input": json.loads(act.arguments)})
        return {"role": "assistant", "content": blocks}


def _unanswered_uses(history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ``tool_use`` blocks of the last assistant message (the Anthropic form), when no message follows it."""
    if not history or history[-1].get("role") != "assistant":
        return []
    content = history[-1].get("content")
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_use"]


def _skip(pattern: re.Pattern[str], text: str, at: int) -> int:
    """Where ``pattern`` (which matches the empty string too) ends, matched at ``at``."""
    match = pattern.match(text, at)
    return at if match is None else match.end()


def _ask(ident: str | None, arguments: str) -> str:
    """An ``ask_user`` call (its arguments' JSON text) as a DIAL ask with id ``ident`` (escaped; ``None``: the
    runtime numbers it): a choice among its options, or a free answer."""
    try:
        given = json.loads(arguments)
    except ValueError:
        given = None
    question = given.get("question") if isinstance(given, dict) else None
    options = given.get("options") if isinstance(given, dict) else None
    text = question if isinstance(question, str) else arguments
    choices = [option for option in options if isinstance(option, str)] if isinstance(options, list) else []
    named = "" if ident is None else f' id="{ident}"'
    if not choices:
        return f"  <dial-ask{named}>{escape_text(text)}</dial-ask>"
    written = "".join(
        f'<dial-option value="{escape_attribute(option)}">{escape_text(option)}</dial-option>'
        for option in choices
    )
    return f'  <dial-ask{named} response-type="choice">{escape_text(text)}{written}</dial-ask>'


def tool_result(reported: Reported) -> str:
    """What a ``tool`` message says of an outcome: the acknowledgement, then the outcome's facts as JSON."""
    return f"{reported.acknowledgement}\n{reported.body}"


def _said(outcomes: Iterable[Reported], reports: Reports) -> list[str]:
    """What a message to the model says besides the results of its last calls: the outcomes of calls answered
    before, the notices about its replies, then the rest (the domain's context and the person's words)."""
    said = [f"Outcome of your call {reported.id}: {tool_result(reported)}" for reported in outcomes]
    said.extend(reports.notices)
    if reports.rest:
        said.append(reports.rest)
    return said


def _unanswered(history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tool calls of the last assistant message that no ``tool`` message after it answers."""
    if history:  # most often the model's last message ends the history: its calls, if any, all wait
        last = history[-1]
        if last.get("role") == "assistant":
            calls = last.get("tool_calls")
            return [call for call in calls if isinstance(call, dict)] if isinstance(calls, (list, tuple)) else []
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, (list, tuple)):
            return []
        answered = {later.get("tool_call_id") for later in history[index + 1 :] if later.get("role") == "tool"}
        return [call for call in calls if isinstance(call, dict) and call.get("id") not in answered]
    return []


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _arguments_text(arguments: Any) -> str:
    """A call's arguments as JSON text (as the API sends them; a server that sent an object has it written)."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return compact_json(arguments)


class StructuredCodec:
    """Structured output: the whole reply is one JSON object that the reply's JSON Schema (:meth:`schema`) fixes,
    for servers that constrain decoding to a schema but call tools poorly (llama.cpp's ``response_format``,
    vLLM's guided JSON): ``{"acts": [...]}``, each act an ``inform`` (``text``), an ``ask`` (``question`` and
    ``options``) or a ``suggest`` (``action``, one of the domain's, with ``text`` and the action's ``payload``).
    It is the JSON twin of the grammar :func:`~dial_runtime.llm.grammar.domain_grammar` writes.

    The runtime's messages go to the model as JSON too: ``{"outcomes": [...], "notices": [...], "message":
    "..."}``, each outcome with the id the runtime gave the suggestion, and only the parts there are. A reply that
    is not such an object is the model's words, shown as they are. A reply is read once it is whole: nothing of it
    is shown while it streams."""

    name = "json"
    api = "openai-chat"

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema

    @classmethod
    def for_domain(cls, domain: Any) -> StructuredCodec:
        """The codec for ``domain``'s actions (see :func:`reply_schema`)."""
        return cls(reply_schema(domain))

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of one reply."""
        return self._schema

    def request_fields(self) -> dict[str, Any]:
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "dial_reply", "strict": True, "schema": self._schema},
            }
        }

    def incoming(self, message: str, history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        reports = read_reports(message)
        told: dict[str, Any] = {}
        if reports.outcomes:
            told["outcomes"] = [{"id": reported.id, **reported.fact()} for reported in reports.outcomes]
        if reports.notices:
            told["notices"] = list(reports.notices)
        if reports.rest or not told:
            told["message"] = reports.rest
        return [{"role": "user", "content": compact_json(told)}]

    def read(self, message: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> Read:
        text = _text(message.get("content"))
        kept = {"role": "assistant", "content": text}
        try:
            reply = msgspec.json.decode(text)
        except msgspec.DecodeError:
            reply = None
        acts = reply.get("acts") if isinstance(reply, dict) else None
        if not isinstance(acts, list):
            return Read(dial=_informing(text) if text.strip() else "", message=kept)
        elements = [element for act in acts if (element := _act_element(act)) is not None]
        dial = "<dial>\n" + "\n".join(elements) + "\n</dial>" if elements else ""
        return Read(dial=dial, message=kept)

    def live(self) -> Live:
        return _WhenWhole()

    def spoken(self, dial: str, called: Sequence[Called]) -> dict[str, Any]:
        """A recorded DIAL reply as this codec's JSON object of acts."""
        acts = spoken_acts(dial, called)
        written: list[dict[str, Any]] = [{"act": "inform", "text": acts.text}] if acts.text else []
        for act in acts.calls:
            given = json.loads(act.arguments)
            if act.name == _ASK_TOOL:
                written.append({"act": "ask", **given})
            else:
                written.append({"act": "suggest", "action": act.name, "text": act.text, "payload": given})
        return {"role": "assistant", "content": compact_json({"acts": written})}


class _WhenWhole:
    """A live reply that gives nothing until the whole reply is read."""

    def feed(self, text: str) -> str:
        return ""

    def finish(self, dial: str) -> str:
        return dial

    def cut(self, text: str) -> str:
        return f"<dial>\n  <dial-inform>{escape_text(text)}" if text.strip() else ""


def _informing(text: str) -> str:
    return f"<dial>\n  <dial-inform>{escape_text(text.strip())}</dial-inform>\n</dial>"


def _act_element(act: Any) -> str | None:
    """One act of a structured reply as a DIAL element; ``None`` for what is not an act."""
    if not isinstance(act, dict):
        return None
    kind = act.get("act")
    if kind == "inform" and isinstance(act.get("text"), str):
        return f"  <dial-inform>{escape_text(act['text'])}</dial-inform>"
    if kind == "ask" and isinstance(act.get("question"), str):
        arguments = compact_json({"question": act["question"], "options": act.get("options") or []})
        return _ask(None, arguments)
    if kind == "suggest" and isinstance(act.get("action"), str):
        words = act.get("text")
        text = words if isinstance(words, str) else ""
        payload = compact_json(act.get("payload", {}))
        return (
            f'  <dial-suggest action="{escape_attribute(act["action"])}">{escape_text(text)}'
            f'<dial-payload type="application/json">{escape_text(payload)}</dial-payload></dial-suggest>'
        )
    return None


def reply_schema(domain: Any) -> dict[str, Any]:
    """The JSON Schema of one structured reply for ``domain`` (see :class:`StructuredCodec`): each action's
    payload schema as the domain's vocabulary gives it (its ``$defs`` moved to the root, named for the action)."""
    from ..agents.prompt import vocabulary  # prompt imports the runtime's records; keep this import light

    definitions: dict[str, Any] = {}
    acts: list[dict[str, Any]] = [
        _closed({"act": {"const": "inform"}, "text": {"type": "string"}}),
        _closed(
            {
                "act": {"const": "ask"},
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "string"}},
            }
        ),
    ]
    for entry in vocabulary(domain):
        given = entry.schema if isinstance(entry.schema, Mapping) else _ANY_OBJECT
        payload = _hoisted(given, _tool_name(entry.name), definitions)
        acts.append(
            _closed(
                {
                    "act": {"const": "suggest"},
                    "action": {"const": entry.name},
                    "text": {"type": "string"},
                    "payload": payload,
                }
            )
        )
    reply = _closed({"acts": {"type": "array", "items": {"anyOf": acts}}})
    if definitions:
        reply["$defs"] = definitions
    return reply


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _hoisted(schema: Mapping[str, Any], prefix: str, definitions: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its ``$defs``, which go into ``definitions`` as ``PREFIX__NAME``, every local
    reference to them rewritten."""
    local = schema.get("$defs") if isinstance(schema.get("$defs"), Mapping) else {}

    def renamed(node: Any) -> Any:
        if isinstance(node, Mapping):
            result = {}
            for key, value in node.items():
                if key == "$defs" and node is schema:
                    continue
                if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
                    result[key] = f"#/$defs/{prefix}__{value.removeprefix('#/$defs/')}"
                else:
                    result[key] = renamed(value)
            return result
        if isinstance(node, list):
            return [renamed(item) for item in node]
        return node

    for name, definition in local.items():  # type: ignore[union-attr]
        definitions[f"{prefix}__{name}"] = renamed(definition)
    return renamed(schema)  # type: ignore[no-any-return]


class OnResponses:
    """A chat-completions codec (``inner``) spoken on the OpenAI Responses API (``POST /v1/responses``).

    The history stays in the chat form ``inner`` reads and writes; :func:`responses_input` turns it into the
    request's input items (a user or assistant message item per message, a ``function_call`` item per tool call,
    a ``function_call_output`` item per ``tool`` message, each keyed by the call's id), the tools are written flat
    (``{"type": "function", "name": ..., "parameters": ...}``) and a response format becomes ``text.format``. A
    model's answer is its response's output items (``{"output": [...]}``, as the log keeps it), read as the chat
    message they make (:func:`chat_message`): the text of its message items, a tool call per ``function_call``
    item, whose ``call_id`` is the suggestion's id."""

    api = "openai-responses"

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.name = inner.name
        fields = inner.request_fields()
        written: dict[str, Any] = {}
        if "tools" in fields:
            written["tools"] = [{"type": "function", **tool["function"]} for tool in fields["tools"]]
        given = fields.get("response_format")
        if given is not None:
            written["text"] = {"format": {"type": "json_schema", **given["json_schema"]}}
        self._fields = written

    def request_fields(self) -> dict[str, Any]:
        return self._fields

    def incoming(self, message: str, history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return self.inner.incoming(message, history)

    def read(self, message: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> Read:
        return self.inner.read(chat_message(message), history)

    def live(self) -> Live:
        return self.inner.live()

    def spoken(self, dial: str, called: Sequence[Called]) -> dict[str, Any]:
        return self.inner.spoken(dial, called)


def responses_input(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (the form :class:`OnResponses` keeps) as the Responses API's input items."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            output = _text(message.get("content"))
            items.append(
                {"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": output}
            )
            continue
        text = _text(message.get("content"))
        if text or role != "assistant":
            items.append({"type": "message", "role": role, "content": text})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": _arguments_text(function.get("arguments")),
                }
            )
    return items


def chat_message(response: Mapping[str, Any]) -> dict[str, Any]:
    """A response's output items (``{"output": [...]}``) as the chat assistant message they make: the text of its
    message items (their ``output_text`` and ``refusal`` parts), and a tool call per ``function_call`` item (its
    ``call_id`` the call's id). Other items (reasoning, a server's own tools) say nothing to the runtime."""
    output = response.get("output")
    items = [item for item in output if isinstance(item, Mapping)] if isinstance(output, list) else []
    pieces: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, str):
                pieces.append(content)
            elif isinstance(content, list):
                pieces += [_part_text(part) for part in content if isinstance(part, Mapping)]
        elif kind == "function_call":
            function = {"name": item.get("name"), "arguments": _arguments_text(item.get("arguments"))}
            calls.append({"id": item.get("call_id"), "type": "function", "function": function})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _part_text(part: Mapping[str, Any]) -> str:
    """An output message part's text: an ``output_text`` part's text, a ``refusal`` part's refusal."""
    value = part.get("refusal") if part.get("type") == "refusal" else part.get("text")
    return value if isinstance(value, str) else ""


class SpokenCall(msgspec.Struct, frozen=True, kw_only=True):
    """A suggestion or an ask of a recorded DIAL reply, as a call: its id, the action (``ask_user`` for an ask),
    its arguments as JSON text, and the agent's words with it."""

    id: str
    name: str
    arguments: str
    text: str = ""


class SpokenActs(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded DIAL reply as a model speaking a codec would have said it: its informs' text, and its calls."""

    text: str
    calls: tuple[SpokenCall, ...] = ()


def spoken_acts(dial: str, called: Sequence[Called]) -> SpokenActs:
    """A recorded reply's informs and calls (see :class:`SpokenActs`): the text of the informs of ``dial``, and
    each suggestion and ask the runtime read from it (``called``, from the log: the ids it gave them, a
    suggestion's payload its declare's too) as a call, in the reply's order. A reply that is no envelope is text
    (the model's prose), unless it is the start of one a stream left cut."""
    envelope = parse(dial)
    if envelope is None:
        text = "" if "<dial" in dial else dial.strip()
    else:
        text = "\n\n".join(
            element.text for element in envelope.elements if isinstance(element, Inform) and element.text
        )
    calls: list[SpokenCall] = []
    for each in sorted(called, key=lambda each: (each.element is None, each.element or 0)):
        if each.action is not None:
            payload = {} if each.payload is None else each.payload
            calls.append(SpokenCall(id=each.id, name=each.action, arguments=compact_json(payload), text=each.text))
        else:
            asked = {"question": each.text, "options": [option.value for option in each.options]}
            calls.append(
                SpokenCall(id=each.id or f"ask-{each.element}", name=_ASK_TOOL, arguments=compact_json(asked))
            )
    return SpokenActs(text=text, calls=tuple(calls))


def codec_for(name: str, domain: Any = None, *, strict: bool = False, api: str = "openai-chat") -> Codec:
    """The codec called ``name`` (one of :data:`CODECS`) for the ``api`` (one of :data:`APIS`), for ``domain``'s
    actions where it names them; ``ValueError`` naming the codecs for any other name, for ``tools`` or ``json``
    without a domain, and for ``json`` on the Anthropic API, which has no structured output to constrain a reply
    with."""
    if api not in APIS:
        raise ValueError(f"unknown API {api!r}; use one of {', '.join(APIS)}")
    if api == "openai-responses":
        return OnResponses(codec_for(name, domain, strict=strict))
    if name == "dial":
        return DialCodec()
    if name in ("tools", "json") and domain is None:
        raise ValueError(f"the {name} codec needs the domain, whose actions it names")
    if name == "json" and api == "anthropic-messages":
        raise ValueError("the json codec needs a server's structured output, which the Anthropic API has not")
    if name == "tools":
        if api == "anthropic-messages":
            return AnthropicToolCodec.for_domain(domain)
        return ToolCallCodec.for_domain(domain, strict=strict)
    if name == "json":
        return StructuredCodec.for_domain(domain)
    raise ValueError(f"unknown codec {name!r}; use one of {', '.join(CODECS)}")
