"""From the runtime's events and pending records to AG-UI's events, messages and interrupts (no I/O).

:class:`EventMapper` (a live run) and :func:`messages_of` (the snapshot a reloading page gets) both render the
conversation's :class:`~dial_runtime.views.person.Projection`, so the two carry the same content, each item
as the same JSON view (:func:`item_view`): the person's words (``metadata.words``, their answers too), the agent's
text, an ask's question (``metadata.question``), each card with its preview, destructive mark, status, outcome in
words and the payload that waits or ran (``metadata.card``); live, a change to a card or a question already shown
is a ``CUSTOM`` ``dial.card`` or ``dial.question`` carrying it as it is now; and
what the person sees beside the chat as AG-UI activity messages: the notices (``dial.notice``: no reply, the turn
limit, ...), the asides (``dial.aside``) and the proposals that never became cards (``dial.refused``). Neither
reads an event itself.

Payloads are also given as their JSON text (``payload_json``): a browser's ``JSON.parse`` rounds integers past
2**53, so a client shows (and edits) the text, never a number it parsed.

Text: an ``inform`` (or an ``ask``'s question) is one complete text message: ``TEXT_MESSAGE_START``, one
``TEXT_MESSAGE_CONTENT``, ``TEXT_MESSAGE_END``. The mapper keeps a text message open between events, so an event
carrying a delta of the reply's text (``inform-delta``: its ``text`` is the next chunk of the element the runtime
is reading, ``element`` its index) only adds ``TEXT_MESSAGE_CONTENT`` to the open message, and the complete
``inform`` of the same element closes it instead of repeating the text (adding first what the deltas had not
carried, when the deltas are the start of it).

:func:`encode_sse` writes an event as its server-sent event, as ag-ui's ``EventEncoder`` does.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable, Iterable, Sequence
from json.encoder import encode_basestring
from typing import Any

import msgspec
from ag_ui.core import (
    ActivityMessage,
    ActivitySnapshotEvent,
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
from ag_ui.encoder import EventEncoder

from .. import Ask, LogEntry, Suggestion
from ..runtime.events import Event, InformDeltaEvent
from ..runtime.records import payload_digest
from ..views.person import (
    AgentText,
    Aside,
    Card,
    Item,
    Notice,
    PersonWords,
    Projection,
    Question,
    RefusedProposal,
    project,
)

__all__ = [
    "EventMapper",
    "encode_sse",
    "interrupt_for",
    "interrupt_id",
    "item_view",
    "messages_from_log",
    "messages_of",
    "payload_digest",
]

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


_ENCODER = EventEncoder()


def encode_sse(event: BaseEvent) -> bytes:
    """``event`` as a server-sent event in UTF-8, byte for byte what ag-ui's ``EventEncoder`` writes. A streamed
    chunk's ``TEXT_MESSAGE_CONTENT`` with no optional field set, the one event sent per chunk, is written here
    (its two strings escaped as pydantic escapes them), a fifth of the encoder's cost; any other event by the
    encoder."""
    if (
        type(event) is TextMessageContentEvent
        and event.timestamp is None
        and event.raw_event is None
        and event.metadata is None
        and event.subagent_run_id is None
        and not event.model_extra
    ):
        message_id, delta = encode_basestring(event.message_id), encode_basestring(event.delta)
        with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: the encoder's own error, below
            return f'data: {{"type":"TEXT_MESSAGE_CONTENT","messageId":{message_id},"delta":{delta}}}\n\n'.encode()
    return _ENCODER.encode(event).encode()


def iso_time(seconds: float) -> str:
    """Seconds since the epoch as an ISO 8601 time in UTC, to the millisecond (``2026-12-06T09:30:00.000Z``)."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def interrupt_id(subject_id: str, refusals: int) -> str:
    """The interrupt that puts a suggestion (or ask) to the person: its id, and after each refused edit a new one
    (``sg-1~2``, ``sg-1~3``), so a resume answering what was shown before the refusal names an interrupt that no
    longer waits.

    Every ``~`` of the id is doubled, so the one ``~`` that marks a refusal's count cannot be read as part of an
    id: the interrupts of different subjects, or of one subject at different counts, never share an id, whatever
    ids the agent gave (``n`` after one refusal is ``n~2``, the agent's own ``n~2`` is ``n~~2``)."""
    escaped = subject_id.replace("~", "~~")
    return escaped if refusals == 0 else f"{escaped}~{refusals + 1}"


def interrupt_for(pending: Suggestion | Ask, *, refusals: int = 0, can_decide: bool = True) -> Interrupt:
    """The AG-UI interrupt for a pending suggestion (``tool_call``) or ask (``input_required``).

    ``metadata`` carries what AG-UI has no field for: a suggestion's action, the agent's words for it (``text``),
    payload (also as exact JSON text, whole and field by field: ``payloadJson``, ``payloadFields``), digest,
    destructive and mutates marks and (after a refused edit) the domain's ``issue``; an ask's response type and
    options. A suggestion with a deadline expires then: ``expiresAt``, ISO 8601 in UTC to the millisecond, as
    AG-UI's interrupt pattern reads it (a client judges an expired interrupt unanswerable).
    ``canDecide`` is false when the caller may see but not decide it. The interrupt's id is
    :func:`interrupt_id`'s (an ask's never changes: an answer is never refused).
    """
    if isinstance(pending, Suggestion):
        metadata: dict[str, Any] = {
            "kind": "suggestion",
            "action": pending.action,
            "text": pending.text,
            "payload": pending.payload,
            "payloadJson": pretty_json(pending.payload),
            "payloadFields": payload_fields(pending.payload),
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
            expires_at=None if pending.deadline is None else iso_time(pending.deadline),
            metadata=metadata,
        )
    options = [{"value": option.value, "label": option.label or option.value} for option in pending.options]
    answer: dict[str, Any] = {"type": "string"}
    if options:
        answer["enum"] = [option["value"] for option in options]
    return Interrupt(
        id=interrupt_id(pending.id, 0),
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
    """Turns a conversation into AG-UI events as it goes on, rendering its
    :class:`~dial_runtime.views.person.Projection`: each log entry (or bare event) fed adds or changes items,
    and each item becomes AG-UI events. It keeps what AG-UI's stream needs between them: the open text message
    (text still arriving, ``inform-delta``, goes into it) and which cards the client has been shown.

    ``message_ids`` names each new agent message (by default ``m-1``, ``m-2``, ...); ``history`` is the log the
    client has seen already (fed silently: a resume's outcomes answer tool calls of an earlier run). The person's
    words are messages named ``said-<seq>``: only their answers are sent live (the client sent their other words
    itself), all of them in a snapshot.
    """

    def __init__(self, *, message_ids: Callable[[], str] | None = None, history: Iterable[LogEntry] = ()) -> None:
        self._count = 0
        self._message_ids = message_ids or self._next_id
        self.projection = Projection()
        self.projection.feed_all(history)
        self._called = set(self.projection.shown)  # the cards the client has as tool calls
        self._cards_shown = {card.id: _as_shown(card) for card in _cards(self.projection)}
        self._reported = {card.id for card in _cards(self.projection) if card.reported is not None}
        self._asked = {item.id for item in self.projection.items if isinstance(item, Question)}
        self._questions_shown = {
            item.id: _as_shown(item) for item in self.projection.items if isinstance(item, Question)
        }
        self._open: tuple[str, int | None] | None = None
        self._streamed: list[str] = []  # the text the open message's deltas carried

    def _next_id(self) -> str:
        self._count += 1
        return f"m-{self._count}"

    def map(self, event: Event | InformDeltaEvent | LogEntry) -> list[BaseEvent]:
        """The AG-UI events that show what ``event`` (or a log entry) adds or changes (none for what only the
        log needs)."""
        if isinstance(event, InformDeltaEvent):
            return self._delta(event)
        return [mapped for item in self.projection.feed(event) for mapped in self._item(item)]

    def catch_up(self, log: Sequence[LogEntry], *, through: object = None) -> list[BaseEvent]:
        """The AG-UI events for the entries of ``log`` (a conversation's whole log) not fed yet: up to the one
        whose event is ``through`` (the event ``on_event`` is showing: what was recorded after it, text still
        arriving comes first), or all of them."""
        mapped: list[BaseEvent] = []
        for entry in log[self.projection.fed :]:
            mapped += self.map(entry)
            if entry.event is through:
                break
        return mapped

    def close(self) -> list[BaseEvent]:
        """End the open text message, if any (before anything that is not more of its text, and at a run's end)."""
        if self._open is None:
            return []
        message_id, _ = self._open
        self._open = None
        return [TextMessageEndEvent(message_id=message_id)]

    def _item(self, item: Item) -> list[BaseEvent]:
        match item:
            case AgentText():
                return self._inform(item)
            case Question(id=ident) if ident not in self._asked:
                self._asked.add(ident)
                self._questions_shown[ident] = _as_shown(item)
                return self._text(item.text, item.element, metadata={"question": item_view(item)})
            case Question(id=ident) if self._questions_shown.get(ident) != _as_shown(item):
                self._questions_shown[ident] = _as_shown(item)
                return [*self.close(), CustomEvent(name="dial.question", value={"question": item_view(item)})]
            case Card():
                return self._card(item)
            case PersonWords(how="answer"):
                return self._words(item)
            case Notice(what=what) | Aside(what=what):
                custom = CustomEvent(name=f"dial.{what}", value=_custom(item))
                return [*self.close(), custom, *self._activity(item)]
            case RefusedProposal():
                return [*self.close(), *self._activity(item)]
        return []

    def _activity(self, item: Notice | Aside | RefusedProposal) -> list[BaseEvent]:
        """What the person sees beside the chat, as an activity message (none for an aside with nothing to say)."""
        kind = _activity_type(item)
        if kind is None:
            return []
        return [ActivitySnapshotEvent(message_id=self._message_ids(), activity_type=kind, content=item_view(item))]

    def _start(self, element: int | None, metadata: dict[str, Any] | None = None) -> tuple[list[BaseEvent], str]:
        message_id = self._message_ids()
        self._open = (message_id, element)
        self._streamed = []
        start = TextMessageStartEvent(message_id=message_id, role="assistant", metadata=metadata)
        return [start], message_id

    def _delta(self, event: InformDeltaEvent) -> list[BaseEvent]:
        element = event.element
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

    def _inform(self, text: AgentText) -> list[BaseEvent]:
        element = text.element
        if self._open is not None and element is not None and self._open[1] == element:
            streamed = "".join(self._streamed)
            rest = text.text[len(streamed) :] if text.text.startswith(streamed) else ""
            content = [TextMessageContentEvent(message_id=self._open[0], delta=rest)] if rest else []
            marked = [] if text.unconfirmed is None else [_unconfirmed(self._open[0], text.unconfirmed)]
            return [*content, *marked, *self.close()]
        return self._text(text.text, element, _text_metadata(text))

    def _text(self, text: str, element: int | None, metadata: dict[str, Any] | None = None) -> list[BaseEvent]:
        events = self.close()
        if not text:
            return events
        started, message_id = self._start(element, metadata)
        return [*events, *started, TextMessageContentEvent(message_id=message_id, delta=text), *self.close()]

    def _words(self, words: PersonWords) -> list[BaseEvent]:
        message_id = _said_id(words) or self._message_ids()
        return [
            *self.close(),
            TextMessageStartEvent(message_id=message_id, role="user", metadata=_words_metadata(words)),
            TextMessageContentEvent(message_id=message_id, delta=words.text),
            TextMessageEndEvent(message_id=message_id),
        ]

    def _card(self, card: Card) -> list[BaseEvent]:
        """A card new to the client is a tool call; one that ended, its tool result; any other change to it (a
        decision, a refused edit, the payload that started running) a ``CUSTOM`` ``dial.card``: all carry the
        card as it is now."""
        shown = {"card": item_view(card)}
        seen, self._cards_shown[card.id] = self._cards_shown.get(card.id), _as_shown(card)
        events: list[BaseEvent] = []
        if card.id not in self._called:
            self._called.add(card.id)
            events += [
                *self.close(),
                ToolCallStartEvent(tool_call_id=card.id, tool_call_name=card.action, metadata=shown),
                ToolCallArgsEvent(tool_call_id=card.id, delta=_json(card.proposed)),
                ToolCallEndEvent(tool_call_id=card.id),
            ]
        elif card.reported is None and seen != self._cards_shown[card.id]:
            events += [*self.close(), CustomEvent(name="dial.card", value=shown)]
        if card.reported is not None and card.id not in self._reported:
            self._reported.add(card.id)
            events += [
                *self.close(),
                ToolCallResultEvent(
                    message_id=self._message_ids(),
                    tool_call_id=card.id,
                    content=_json(card.reported.fact()),
                    metadata=shown,
                ),
            ]
        return events


def _cards(projection: Projection) -> list[Card]:
    return [item for item in projection.items if isinstance(item, Card)]


def _as_shown(item: Card | Question) -> Card | Question:
    """A card or a question as a client shows it: waiting now or waiting to be decided later look alike, and a
    run's key and start, which a client does not show, change nothing (a read-only card runs as it is shown)."""
    if isinstance(item, Card):
        item = msgspec.structs.replace(item, run_key=None, started_at=None)
        return msgspec.structs.replace(item, status="pending") if item.waiting else item
    return msgspec.structs.replace(item, status="asked") if item.status == "waiting" else item


def _said_id(words: PersonWords) -> str | None:
    """The id of a message of the person's: ``said-<seq>``, which a client sending it back does not say again."""
    return None if words.seq is None else f"said-{words.seq}"


def _text_metadata(text: AgentText) -> dict[str, Any] | None:
    """An agent's text's ``metadata``: ``unconfirmed`` (why) when it is an acknowledgement the log contradicts,
    which a client shows as the agent's own claim."""
    return None if text.unconfirmed is None else {"unconfirmed": text.unconfirmed}


def _unconfirmed(message_id: str, why: str) -> CustomEvent:
    """``CUSTOM dial.unconfirmed``: the text message streaming is an acknowledgement the log contradicts."""
    return CustomEvent(name="dial.unconfirmed", value={"messageId": message_id, "unconfirmed": why})


def _words_metadata(words: PersonWords) -> dict[str, Any]:
    return {"words": {"how": words.how, "by": words.by, "subject_id": words.subject_id}}


def item_view(item: Item) -> dict[str, Any]:
    """A projection's item as JSON-ready data, as every message and event carries it (``kind`` names its type);
    a card's and a refused proposal's payload also as its JSON text (``payload_json``, exact where a browser's
    numbers are not), and a card's ``digest`` (of the payload it shows); a card's payload and, once done, what it
    returned, field by field when they are objects (``payload_fields``, ``result_fields``)."""
    view: dict[str, Any] = msgspec.to_builtins(item)
    if isinstance(item, Card | RefusedProposal):
        view["payload_json"] = pretty_json(item.payload)
    if isinstance(item, Card):
        view["digest"] = item.digest
        view["payload_fields"] = payload_fields(item.payload)
        view["result_fields"] = None if item.result is None else payload_fields(json.loads(item.result))
    return view


def pretty_json(value: Any) -> str:
    """A payload as the person reads it: indented JSON text, every number as exact as Python holds it."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def payload_fields(payload: Any) -> list[dict[str, str]] | None:
    """Each field of an object payload, its name and its value as exact JSON text (``{"name", "json"}``, in the
    payload's order), for a card to show every field that would run; ``None`` for a payload that is no object."""
    if not isinstance(payload, dict):
        return None
    return [
        {"name": str(name), "json": json.dumps(value, ensure_ascii=False, default=str)}
        for name, value in payload.items()
    ]


#: The activity type of each kind of item shown beside the chat (AG-UI activity messages).
ACTIVITY_TYPES: dict[type[Any], str] = {
    Notice: "dial.notice",
    Aside: "dial.aside",
    RefusedProposal: "dial.refused",
}


def _activity_type(item: Item) -> str | None:
    """An item's activity type: an aside with nothing to say has none."""
    if isinstance(item, Aside) and not item.text:
        return None
    return ACTIVITY_TYPES.get(type(item))


def _custom(item: Notice | Aside) -> dict[str, Any]:
    """A ``CUSTOM`` event's value: the event's own fields, and for a notice its words (``text``)."""
    return {**item.data, "text": item.text} if isinstance(item, Notice) else dict(item.data)


def messages_from_log(entries: Sequence[LogEntry]) -> list[Message]:
    """The conversation so far as AG-UI messages (``MESSAGES_SNAPSHOT``): see :func:`messages_of`."""
    return messages_of(project(entries))


def messages_of(projection: Projection) -> list[Message]:
    """A projected log as AG-UI messages: the person's words (said, answers, words given instead of deciding,
    with ``metadata.words``), the agent's text (an ask's question with ``metadata.question``), each card as an
    assistant tool call and, once it ended, a tool message with its outcome's fact (both with ``metadata.card``:
    its preview, destructive mark, status, outcome in words, the payload that waits or ran), and the notices,
    asides and refused proposals as activity messages, each where the live stream put it.

    Ids come from the log's sequence numbers (``said-7``, ``m-12``), so every snapshot of a log names its messages
    alike, and a client sending them back is not taken to say them again.
    """
    placed: list[tuple[int, Message]] = []
    for item in projection.items:
        seq = item.seq or 0
        match item:
            case PersonWords():
                placed.append(
                    (seq, UserMessage(id=f"said-{seq}", content=item.text, metadata=_words_metadata(item)))
                )
            case Question(text=text) if text:
                metadata = {"question": item_view(item)}
                placed.append((seq, AssistantMessage(id=f"m-{seq}", content=text, metadata=metadata)))
            case AgentText(text=text) if text:
                said = AssistantMessage(id=f"m-{seq}", content=text, metadata=_text_metadata(item))
                placed.append((seq, said))
            case Notice() | Aside() | RefusedProposal():
                kind = _activity_type(item)
                if kind is not None:
                    ident = f"{kind.removeprefix('dial.')}-{seq}"
                    placed.append((seq, ActivityMessage(id=ident, activity_type=kind, content=item_view(item))))
            case Card():
                metadata = {"card": item_view(item)}
                call = ToolCall(
                    id=item.id, function=FunctionCall(name=item.action, arguments=_json(item.proposed))
                )
                placed.append((seq, AssistantMessage(id=f"call-{seq}", tool_calls=[call], metadata=metadata)))
                if item.reported is not None:
                    ended = item.ended_seq or seq
                    content = _json(item.reported.fact())
                    message = ToolMessage(
                        id=f"m-{ended}", tool_call_id=item.id, content=content, metadata=metadata
                    )
                    placed.append((ended, message))
    placed.sort(key=lambda pair: pair[0])
    return [message for _, message in placed]
