"""From the runtime's events and pending records to AG-UI's events, messages and interrupts (no I/O).

:class:`EventMapper` is the one place a runtime event becomes AG-UI events, used for a live run and (through
:func:`messages_from_log`) for the snapshot a reloading page gets, so the two can never disagree. It reads events
through their documented ``type`` and fields only.

Text: an ``inform`` (or an ``ask``'s question) is one complete text message: ``TEXT_MESSAGE_START``, one
``TEXT_MESSAGE_CONTENT``, ``TEXT_MESSAGE_END``. The mapper keeps a text message open between events, so an event
carrying a delta of the reply's text (``inform-delta``: its ``text`` is the next chunk of the element the runtime
is reading, ``element`` its index) only adds ``TEXT_MESSAGE_CONTENT`` to the open message, and the complete
``inform`` of the same element closes it instead of repeating the text (adding first what the deltas had not
carried, when the deltas are the start of it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
    Interrupt,
    Message,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from .. import Ask, LogEntry, Outcome, Suggestion
from ..runtime.records import payload_digest

__all__ = [
    "EventMapper",
    "interrupt_for",
    "interrupt_id",
    "messages_from_log",
    "payload_digest",
]

#: Runtime events shown as AG-UI ``CUSTOM`` events named ``dial.<type>`` (the elements the runtime shows but does
#: not act on, and why a call stopped early).
CUSTOM_TYPES = frozenset({"declare", "phatic", "delegate", "execute", "no-reply", "turn-limit"})

#: The answers a suggestion's interrupt takes, as a JSON Schema (AG-UI's ``responseSchema``).
SUGGESTION_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "true: run it (with editedArgs: run that instead)"},
        "editedArgs": {"description": "the payload to run instead; validated by the domain before it runs"},
        "digest": {"type": "string", "description": "the interrupt's metadata.digest: what the person was shown"},
    },
    "required": ["approved"],
    "additionalProperties": False,
}


def _json(value: Any) -> str:
    """Canonical JSON text: what a digest covers and what a tool call's arguments carry."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def interrupt_id(subject_id: str, refusals: int) -> str:
    """The interrupt that puts a suggestion (or ask) to the person: its id, and after each refused edit a new one,
    so a resume answering what was shown before the refusal names an interrupt that no longer waits."""
    return subject_id if refusals == 0 else f"{subject_id}~{refusals + 1}"


def interrupt_for(pending: Suggestion | Ask, *, refusals: int = 0, can_decide: bool = True) -> Interrupt:
    """The AG-UI interrupt for a pending suggestion (``tool_call``) or ask (``input_required``).

    ``metadata`` carries what AG-UI has no field for: a suggestion's action, payload, digest, destructive and
    mutates marks and (after a refused edit) the domain's ``issue``; an ask's response type and options.
    ``canDecide`` is false when the caller may see but not decide it.
    """
    if isinstance(pending, Suggestion):
        metadata: dict[str, Any] = {
            "kind": "suggestion",
            "action": pending.action,
            "text": pending.text,
            "payload": pending.payload,
            "digest": pending.digest,
            "destructive": pending.destructive,
            "mutates": pending.mutates,
            "canDecide": can_decide,
        }
        if pending.issue is not None:
            metadata["issue"] = {
                "code": pending.issue.code,
                "field": pending.issue.field,
                "hint": pending.issue.hint,
            }
        return Interrupt(
            id=interrupt_id(pending.id, refusals),
            reason="tool_call",
            message=pending.preview or pending.action,
            tool_call_id=pending.id,
            response_schema=SUGGESTION_RESPONSE_SCHEMA,
            metadata=metadata,
        )
    options = [{"value": option.value, "label": option.label or option.value} for option in pending.options]
    answer: dict[str, Any] = {"type": "string"}
    if options:
        answer["enum"] = [option["value"] for option in options]
    return Interrupt(
        id=pending.id,
        reason="input_required",
        message=pending.text,
        response_schema={
            "type": "object",
            "properties": {"answer": answer},
            "required": ["answer"],
            "additionalProperties": False,
        },
        metadata={
            "kind": "ask",
            "responseType": pending.response_type,
            "options": options,
            "canDecide": can_decide,
        },
    )


class EventMapper:
    """Turns runtime events into AG-UI events, one event at a time, keeping what AG-UI's stream needs between
    them: the open text message and the suggestions the client was shown (only their outcomes are tool results).

    ``message_ids`` names each new message (by default ``m-1``, ``m-2``, ...); ``shown`` holds the ids of the
    suggestions shown earlier (a resume's outcomes answer tool calls of an earlier run).
    """

    def __init__(self, *, message_ids: Callable[[], str] | None = None, shown: Iterable[str] = ()) -> None:
        self._count = 0
        self._message_ids = message_ids or self._next_id
        self.shown: set[str] = set(shown)
        self._open: tuple[str, int | None] | None = None
        self._streamed: list[str] = []  # the text the open message's deltas carried
        self._handlers: dict[str, Callable[[Any], list[BaseEvent]]] = {
            "inform": self._inform,
            "inform-delta": self._delta,
            "ask": self._ask,
            "suggestion": self._suggestion,
            "outcome": self._outcome,
        }

    def _next_id(self) -> str:
        self._count += 1
        return f"m-{self._count}"

    def map(self, event: Any) -> list[BaseEvent]:
        """The AG-UI events that show ``event`` (none for events only the log needs)."""
        handler = self._handlers.get(event.type)
        if handler is not None:
            return handler(event)
        if event.type in CUSTOM_TYPES:
            fields = {name: _plain(getattr(event, name)) for name in event.__struct_fields__}
            return [*self.close(), CustomEvent(name=f"dial.{event.type}", value=fields)]
        return []

    def close(self) -> list[BaseEvent]:
        """End the open text message, if any (before anything that is not more of its text, and at a run's end)."""
        if self._open is None:
            return []
        message_id, _ = self._open
        self._open = None
        return [TextMessageEndEvent(message_id=message_id)]

    def _start(self, element: int | None) -> tuple[list[BaseEvent], str]:
        message_id = self._message_ids()
        self._open = (message_id, element)
        self._streamed = []
        return [TextMessageStartEvent(message_id=message_id, role="assistant")], message_id

    def _delta(self, event: Any) -> list[BaseEvent]:
        element = getattr(event, "element", None)
        events: list[BaseEvent] = []
        if self._open is None or self._open[1] != element:
            events = self.close()
            started, _ = self._start(element)
            events += started
        assert self._open is not None
        if event.text:
            self._streamed.append(event.text)
            events.append(TextMessageContentEvent(message_id=self._open[0], delta=event.text))
        return events

    def _inform(self, event: Any) -> list[BaseEvent]:
        element = getattr(event, "element", None)
        if self._open is not None and element is not None and self._open[1] == element:
            streamed = "".join(self._streamed)
            rest = event.text[len(streamed) :] if event.text.startswith(streamed) else ""
            content = [TextMessageContentEvent(message_id=self._open[0], delta=rest)] if rest else []
            return [*content, *self.close()]
        return self._text(event.text, element)

    def _ask(self, event: Any) -> list[BaseEvent]:
        return self._text(event.text, getattr(event, "element", None))

    def _text(self, text: str, element: int | None) -> list[BaseEvent]:
        events = self.close()
        if not text:
            return events
        started, message_id = self._start(element)
        return [*events, *started, TextMessageContentEvent(message_id=message_id, delta=text), *self.close()]

    def _suggestion(self, event: Any) -> list[BaseEvent]:
        self.shown.add(event.id)
        return [
            *self.close(),
            ToolCallStartEvent(tool_call_id=event.id, tool_call_name=event.action),
            ToolCallArgsEvent(tool_call_id=event.id, delta=_json(event.payload)),
            ToolCallEndEvent(tool_call_id=event.id),
        ]

    def _outcome(self, event: Any) -> list[BaseEvent]:
        if event.id not in self.shown:
            return self.close()
        return [
            *self.close(),
            ToolCallResultEvent(
                message_id=self._message_ids(), tool_call_id=event.id, content=_json(outcome_of(event).fact())
            ),
        ]


def outcome_of(event: Any) -> Outcome:
    """The :class:`Outcome` an ``outcome`` event reports."""
    return Outcome(**{name: getattr(event, name) for name in Outcome.__struct_fields__})


def _plain(value: Any) -> Any:
    """A field's value as JSON-ready data."""
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "__struct_fields__"):
        return {name: _plain(getattr(value, name)) for name in value.__struct_fields__}
    return value


def messages_from_log(entries: Sequence[LogEntry]) -> list[Message]:
    """The conversation so far as AG-UI messages (``MESSAGES_SNAPSHOT``): the person's words, the agent's text,
    each shown suggestion as an assistant tool call, each of their outcomes as a tool message.

    Ids come from the log's sequence numbers (``said-7``, ``m-12``), so every snapshot of a log names its messages
    alike, and a client sending them back is not taken to say them again.
    """
    messages: list[Message] = []
    seq = 0

    def message_id() -> str:
        return f"m-{seq}"

    mapper = EventMapper(message_ids=message_id)
    text: dict[str, str] = {}
    for entry in entries:
        seq = entry.seq
        event: Any = entry.event
        if event.type == "said":
            if event.text:
                messages.append(UserMessage(id=f"said-{seq}", content=event.text))
            continue
        for mapped in mapper.map(event):
            if isinstance(mapped, TextMessageStartEvent):
                text[mapped.message_id] = ""
            elif isinstance(mapped, TextMessageContentEvent):
                text[mapped.message_id] += mapped.delta
            elif isinstance(mapped, TextMessageEndEvent):
                messages.append(AssistantMessage(id=mapped.message_id, content=text.pop(mapped.message_id)))
            elif isinstance(mapped, ToolCallStartEvent):
                call = ToolCall(
                    id=mapped.tool_call_id,
                    function=FunctionCall(name=mapped.tool_call_name, arguments=_json(event.payload)),
                )
                messages.append(AssistantMessage(id=f"call-{seq}", tool_calls=[call]))
            elif isinstance(mapped, ToolCallResultEvent):
                messages.append(
                    ToolMessage(id=mapped.message_id, tool_call_id=mapped.tool_call_id, content=mapped.content)
                )
    return messages
