"""Everything that happens in a conversation, as frozen records; the conversation's log is a list of them.

``on_event`` sees the events a surface renders (``sent``, ``reply``, ``inform``, ``ask``, ``suggestion``,
``outcome``, ``no-reply``, ``turn-limit``, and ``declare``, ``phatic``, ``delegate``, ``execute`` for the elements
the seed contract ignores). The log also holds the events the conversation's state depends on but no surface
renders (``said``, ``resumed``, ``reply-started``, ``proposed``, ``answered``, ``decided``, ``deferred``,
``refused``, ``action-started``, ``handled``, ``send-failed``, ``reply-refused``, ``interrupted``, ``ended``,
``finished``).
Every event turns into a JSON-ready dict with :func:`event_to_dict` and back with :func:`event_from_dict`,
without loss.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, get_args

import attrs

from ..language.outcomes import Outcome
from ..language.records import Option, Step


def _options(values: Iterable[Option | Mapping[str, Any]]) -> tuple[Option, ...]:
    return tuple(value if isinstance(value, Option) else Option(**value) for value in values)


def _steps(values: Iterable[Step | Mapping[str, Any]]) -> tuple[Step, ...]:
    return tuple(
        value if isinstance(value, Step) else Step(**{**value, "yields": tuple(value.get("yields", ()))})
        for value in values
    )


def _kind(name: str) -> Any:
    return attrs.field(default=name, init=False)


@attrs.frozen(kw_only=True)
class SentEvent:
    """A message went to the agent (``turn`` counts from 1 in each ``say``)."""

    type: str = _kind("sent")
    turn: int
    message: str


@attrs.frozen(kw_only=True)
class ReplyEvent:
    """The agent's raw reply arrived (whole: a streamed reply is reported when its last chunk is in);
    everything the message carried counts as delivered."""

    type: str = _kind("reply")
    turn: int
    text: str


@attrs.frozen(kw_only=True)
class ReplyStartedEvent:
    """The first chunk of a streamed reply arrived: the message was delivered, and handling begins."""

    type: str = _kind("reply-started")
    turn: int


@attrs.frozen(kw_only=True)
class InformEvent:
    """Something to show the person; ``act`` is ``inform`` or ``acknowledge`` when it came from an element."""

    type: str = _kind("inform")
    text: str
    act: str | None = None
    element: int | None = None


@attrs.frozen(kw_only=True)
class AskEvent:
    """A question the agent asked (put to the person unless they already said something else in this reply)."""

    type: str = _kind("ask")
    text: str
    response_type: str = "text"
    options: tuple[Option, ...] = attrs.field(default=(), converter=_options)
    id: str = ""
    timeout: float | None = None
    asked: bool = True
    element: int | None = None


@attrs.frozen(kw_only=True)
class SuggestionEvent:
    """A valid suggestion, shown to the person (or run at once when read-only or a hand-off)."""

    type: str = _kind("suggestion")
    id: str
    action: str
    text: str
    payload: Any
    preview: str
    destructive: bool
    mutates: bool
    handoff: bool = False


#: The fields an OutcomeEvent shares with the Outcome it reports (all of the Outcome's).
_OUTCOME_FIELDS = tuple(field.name for field in attrs.fields(Outcome))


@attrs.frozen(kw_only=True)
class OutcomeEvent:
    """How a suggestion ended; the fields of its :class:`Outcome`."""

    type: str = _kind("outcome")
    id: str
    action: str
    status: str
    preview: str = ""
    result: Any = None
    error: str | None = None
    code: str | None = None
    field: str | None = None
    hint: str | None = None
    edited: bool = False
    expired: bool = False

    @property
    def outcome(self) -> Outcome:
        """The outcome this event reports."""
        return Outcome(**{name: getattr(self, name) for name in _OUTCOME_FIELDS})


@attrs.frozen(kw_only=True)
class NoReplyEvent:
    """The agent did not answer within the deadline; what it was not told stays owed."""

    type: str = _kind("no-reply")
    turn: int
    error: str


@attrs.frozen(kw_only=True)
class TurnLimitEvent:
    """``max_turns`` turns were used in one ``say``; what is owed goes with the next one."""

    type: str = _kind("turn-limit")
    turns: int


@attrs.frozen(kw_only=True)
class DeclareEvent:
    """The agent declared a fact (an unpaired ``dial-declare``); stored in ``conversation.facts``."""

    type: str = _kind("declare")
    context_key: str
    value: Any
    element: int | None = None


@attrs.frozen(kw_only=True)
class PhaticEvent:
    """A channel signal from the agent (``session-complete`` ends the conversation)."""

    type: str = _kind("phatic")
    signal: str
    element: int | None = None


@attrs.frozen(kw_only=True)
class DelegateEvent:
    """The agent handed something to another actor; shown, not acted on."""

    type: str = _kind("delegate")
    to: str
    intent: str | None = None
    text: str | None = None
    payload: Any = None
    element: int | None = None


@attrs.frozen(kw_only=True)
class ExecuteEvent:
    """The agent sent a step graph; shown, never run by this runtime."""

    type: str = _kind("execute")
    id: str | None = None
    steps: tuple[Step, ...] = attrs.field(default=(), converter=_steps)
    element: int | None = None


@attrs.frozen(kw_only=True)
class SaidEvent:
    """A ``say`` began with these words of the person's (logged even after the conversation ended)."""

    type: str = _kind("said")
    text: str


@attrs.frozen(kw_only=True)
class ProposedEvent:
    """A suggestion was read from a reply (``element``: the last element it used, its declare included);
    ``numbered`` when the runtime assigned its ``sg-N`` id."""

    type: str = _kind("proposed")
    id: str
    action: str
    payload: Any
    numbered: bool
    element: int
    text: str = ""


@attrs.frozen(kw_only=True)
class AnsweredEvent:
    """The person answered an ask; an empty answer (or ``expired``) means the question stands."""

    type: str = _kind("answered")
    ask_id: str
    text: str
    expired: bool = False
    by: str | None = None


@attrs.frozen(kw_only=True)
class DecidedEvent:
    """The person (``by``, when known) decided: ``accept``, ``dismiss``, ``edit``, ``say`` or ``expire``.

    An edit carries the payload before (``previous``) and after (``payload``); a say carries its ``text``.
    """

    type: str = _kind("decided")
    suggestion_id: str
    decision: str
    payload: Any = None
    previous: Any = None
    text: str | None = None
    by: str | None = None


@attrs.frozen(kw_only=True)
class DeferredEvent:
    """The person will decide on a suggestion (or answer an ask) later; the call returns ``awaiting``."""

    type: str = _kind("deferred")
    subject_id: str
    kind: str


@attrs.frozen(kw_only=True)
class RefusedEvent:
    """The domain refused the payload the person accepted or edited; they see ``issue`` and decide again."""

    type: str = _kind("refused")
    suggestion_id: str
    payload: Any
    code: str | None = None
    field: str | None = None
    hint: str | None = None


@attrs.frozen(kw_only=True)
class ActionStartedEvent:
    """An action is about to run with this (validated) payload; its outcome follows, unless the process dies."""

    type: str = _kind("action-started")
    suggestion_id: str
    action: str
    payload: Any
    preview: str
    edited: bool = False


@attrs.frozen(kw_only=True)
class ResumedEvent:
    """A call took up a conversation that was awaiting the person (``decide``, ``answer`` or ``resume``)."""

    type: str = _kind("resumed")
    call: str


@attrs.frozen(kw_only=True)
class HandledEvent:
    """Every element of the turn's reply has been handled and nothing awaits the person."""

    type: str = _kind("handled")
    turn: int


@attrs.frozen(kw_only=True)
class SendFailedEvent:
    """``agent.send`` raised; ``say`` re-raises the error and everything owed stays owed."""

    type: str = _kind("send-failed")
    turn: int
    error: str


@attrs.frozen(kw_only=True)
class ReplyRefusedEvent:
    """A reply could not be used at all; the agent is told why on the next turn."""

    type: str = _kind("reply-refused")
    turn: int
    reply_id: str
    reason: str
    element: int | None = None


@attrs.frozen(kw_only=True)
class InterruptedEvent:
    """A turn stopped early: cancelled by the caller, or a callback of the person's or domain's raised."""

    type: str = _kind("interrupted")
    turn: int
    reason: str


@attrs.frozen(kw_only=True)
class EndedEvent:
    """The conversation ended (the agent's ``session-complete`` or ``end()``); later words are only logged."""

    type: str = _kind("ended")
    reason: str


@attrs.frozen(kw_only=True)
class FinishedEvent:
    """A call finished with this status (a ``TurnResult`` status, ``awaiting`` or ``interrupted``)."""

    type: str = _kind("finished")
    status: str
    turns: int


Event = (
    SentEvent
    | ReplyEvent
    | ReplyStartedEvent
    | InformEvent
    | AskEvent
    | SuggestionEvent
    | OutcomeEvent
    | NoReplyEvent
    | TurnLimitEvent
    | DeclareEvent
    | PhaticEvent
    | DelegateEvent
    | ExecuteEvent
    | SaidEvent
    | ProposedEvent
    | AnsweredEvent
    | DecidedEvent
    | DeferredEvent
    | RefusedEvent
    | ActionStartedEvent
    | ResumedEvent
    | HandledEvent
    | SendFailedEvent
    | ReplyRefusedEvent
    | InterruptedEvent
    | EndedEvent
    | FinishedEvent
)

EVENT_TYPES: dict[str, type[Event]] = {attrs.fields(cls).type.default: cls for cls in get_args(Event)}

_FIELD_NAMES: dict[str, tuple[str, ...]] = {
    kind: tuple(field.name for field in attrs.fields(cls)) for kind, cls in EVENT_TYPES.items()
}

#: Events a surface renders; the others exist for the log (state, audit, replay).
RENDERED = frozenset(
    {
        "sent",
        "reply",
        "inform",
        "ask",
        "suggestion",
        "outcome",
        "no-reply",
        "turn-limit",
        "declare",
        "phatic",
        "delegate",
        "execute",
    }
)


@attrs.frozen(kw_only=True)
class LogEntry:
    """One line of a conversation's log: its 1-based sequence number, wall-clock time, and the event."""

    seq: int
    time: float
    event: Event


def _plain(value: Any) -> Any:
    """A field's value as JSON-ready data: options and steps become dicts, tuples lists."""
    if isinstance(value, tuple):
        return [attrs.asdict(item) if attrs.has(type(item)) else _plain(item) for item in value]
    return value


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as JSON-ready data, ``type`` first."""
    return {name: _plain(getattr(event, name)) for name in _FIELD_NAMES[event.type]}


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """The event :func:`event_to_dict` made; ``ValueError`` for an unknown type."""
    fields = dict(data)
    kind = fields.pop("type", None)
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {kind!r}")
    return cls(**fields)


def entry_to_dict(entry: LogEntry) -> dict[str, Any]:
    """A log entry as JSON-ready data."""
    return {"seq": entry.seq, "time": entry.time, "event": event_to_dict(entry.event)}


def entry_from_dict(data: Mapping[str, Any]) -> LogEntry:
    """The log entry :func:`entry_to_dict` made."""
    return LogEntry(seq=data["seq"], time=data["time"], event=event_from_dict(data["event"]))
