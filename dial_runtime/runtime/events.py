"""Everything that happens in a conversation, as frozen records; the conversation's log is a list of them.

``on_event`` sees the events a surface renders (:data:`RENDERED`: ``sent``, ``reply``, ``inform``, ``ask``,
``suggestion``, ``outcome``, ``no-reply``, ``turn-limit``, ``unconfirmed``; ``declare``, ``phatic``,
``delegate``, ``execute`` for the elements the seed contract ignores; and ``reminded``, ``escalated``,
``claimed``, ``released``, ``assigned``, which change a waiting card). The log also holds the events the
conversation's state depends on but no surface renders (``said``, ``resumed``, ``reply-started``, ``proposed``,
``answered``, ``decided``, ``deferred``, ``refused``, ``action-started``, ``flow-moved``, ``handled``,
``send-failed``, ``reply-refused``, ``reply-cut``, ``reply-repeated``, ``interrupted``, ``ended``,
``finished``), and ``reply-progress``, which keeps a streamed reply's words for the agent's history.
``on_event`` also sees :class:`InformDeltaEvent` (``inform-delta``) while a reply streams in: its text as it
arrives, a notice for the person that is not on the log.
Every event turns into a JSON-ready dict with :func:`event_to_dict` and back with :func:`event_from_dict`,
without loss. A field of a fixed vocabulary is typed with a ``Literal`` (:data:`VOCABULARIES` lists them), so
decoding refuses a word outside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, get_args, get_origin

import msgspec

from ..errors import LogError
from ..language.outcomes import Outcome, OutcomeFields
from ..language.records import Option, Step
from ..language.stream import TextAct
from ..statemachines.suggestion import OutcomeTrigger
from ..statemachines.turn_loop import CallStatus
from .records import ApprovalPolicy, ProviderMessage, RuleVerdict

#: What the person's decision on a suggestion was (``DecidedEvent.decision``).
DecisionKind = Literal["accept", "dismiss", "edit", "say", "expire"]

#: What waits for the person after a ``deferred`` event (``DeferredEvent.kind``).
DeferredKind = Literal["suggestion", "ask"]

#: The call that took up a conversation (``ResumedEvent.call``).
ResumingCall = Literal["say", "decide", "answer", "resume", "expire"]


def _options(values: Iterable[Option | Mapping[str, Any]]) -> tuple[Option, ...]:
    return tuple(value if isinstance(value, Option) else Option(**value) for value in values)


def _steps(values: Iterable[Step | Mapping[str, Any]]) -> tuple[Step, ...]:
    return tuple(
        value if isinstance(value, Step) else Step(**{**value, "yields": tuple(value.get("yields", ()))})
        for value in values
    )


class _Logged(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=True):
    """What every event on the log shares: its JSON form carries its kind as ``type`` (msgspec's tagged union, so
    one decoder reads any event, and an unknown type or field is refused). ``type`` is also a class attribute."""


#: Makes the default of a field written even when it holds it (see :class:`DecidedEvent`): ``NoneType()`` is
#: ``None``, made in C, where a function of our own would cost a Python call for each such field of each event.
_NONE = type(None)


class SentEvent(_Logged, frozen=True, kw_only=True, tag="sent", omit_defaults=True):
    """A message went to the agent (``turn`` counts from 1 in each ``say``).

    ``message_id`` (a conversation with an id: ``"<conversation id>/reply-<n>"``, ``n`` the number of the reply it
    asks for) is the same for a message sent again because no reply to it reached the log (a crash, a deadline, a
    failed send), so the agent's side can tell a copy sent again from a new message. ``context`` is where the
    domain's context for this turn stands in ``message`` (start and end, in characters), when it gave one.
    """

    type: ClassVar[str] = "sent"
    turn: int
    message: str
    message_id: str | None = None
    context: tuple[int, int] | None = None


class ReplyEvent(_Logged, frozen=True, kw_only=True, tag="reply", omit_defaults=True):
    """The agent's raw reply arrived (whole: a streamed reply is reported when its last chunk is in);
    everything the message carried counts as delivered. ``handled_at``: of a streamed reply whose informs or
    acknowledges were handled before its end (each is shown as it completes), how much of ``text`` had arrived
    (in characters) when that last happened; ``None`` when nothing was. ``provider``: the model's own message
    the agent's codec read ``text`` from (tool calls, structured output), when it gave one."""

    type: ClassVar[str] = "reply"
    turn: int
    text: str
    handled_at: int | None = None
    provider: ProviderMessage | None = None


class ReplyStartedEvent(_Logged, frozen=True, kw_only=True, tag="reply-started"):
    """The first chunk of a streamed reply arrived: the message was delivered, and handling begins."""

    type: ClassVar[str] = "reply-started"
    turn: int


class ReplyProgressEvent(_Logged, frozen=True, kw_only=True, tag="reply-progress"):
    """What had arrived of a streamed reply, since the turn's last ``reply-progress``, when the runtime began to
    wait for the person (a decision or an answer): the log's copy of the agent's words, should the process die
    before the reply's end is in. The reply so far is the concatenation of the turn's progress texts."""

    type: ClassVar[str] = "reply-progress"
    turn: int
    text: str


CutCause = Literal["reply-deadline", "idle-deadline", "call-deadline", "broken", "token-limit"]
"""Why a streamed reply stopped before its end (``ReplyCutEvent.cause``)."""


class ReplyCutEvent(_Logged, frozen=True, kw_only=True, tag="reply-cut", omit_defaults=True):
    """The turn's reply stopped before its end (logged right after its ``reply``, which holds what arrived): a
    deadline passed (``seconds``: the deadline's; ``call-deadline``: the call's budget of time for the agent,
    after which the call stops), the stream broke off (``error``: how, as the agent raised
    it), or the model reached its token limit. Only its complete elements are handled; the agent is told."""

    type: ClassVar[str] = "reply-cut"
    turn: int
    cause: CutCause
    seconds: float | None = None
    error: str | None = None


InformAct = Literal["inform", "acknowledge"]
"""The speech act an ``inform`` event's text came from (none: prose around the envelope)."""


class InformEvent(_Logged, frozen=True, kw_only=True, tag="inform"):
    """Something to show the person; ``act`` is ``inform`` or ``acknowledge`` when it came from an element."""

    type: ClassVar[str] = "inform"
    text: str
    act: InformAct | None = None
    element: int | None = None


class UnconfirmedEvent(_Logged, frozen=True, kw_only=True, tag="unconfirmed"):
    """The acknowledgement at ``element`` of the reply contradicts the log (an id the conversation never had, an
    outcome other than the one recorded), or the words there (an inform, or the prose at -1 or -2) say something
    was done in a call where nothing has run: its ``inform`` follows, shown as the agent's own words, not
    confirmed, and the next message tells the agent ``reason``."""

    type: ClassVar[str] = "unconfirmed"
    reason: str
    element: int


class AskEvent(_Logged, frozen=True, kw_only=True, tag="ask"):
    """A question the agent asked (put to the person unless they already said something else in this reply)."""

    type: ClassVar[str] = "ask"
    text: str
    response_type: str = "text"
    options: tuple[Option, ...] = ()
    id: str = ""
    timeout: float | None = None
    asked: bool = True
    element: int | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "options", _options(self.options))


class SuggestionEvent(_Logged, frozen=True, kw_only=True, tag="suggestion", omit_defaults=True):
    """A valid suggestion, shown to the person (or run at once when read-only or a hand-off).

    ``done_before`` names the suggestion of this conversation that last ran the same action with the same payload
    and ended ``done``, when the person decides on this one and its action is not ``repeatable``: the person
    sees that it was done already, and the agent is told so if they dismiss it. ``deadline`` is when the person's
    time to decide ends (seconds since the epoch, as the log's times), for a suggestion that waits for them and
    has one: a decision after it is not taken, and the suggestion ends ``dismissed``, ``expired``. ``policy`` is
    who must approve it (:class:`~dial_runtime.ApprovalPolicy`), and ``asked_by`` whose words asked for it, when
    the policy separates them from its approvers. ``remind_at`` and ``escalate_at`` are when the deciders are
    reminded and when it escalates to the deciders holding ``escalate_to`` (seconds since the epoch).
    ``deadline_after``, ``remind_after`` and ``escalate_after`` are the same times as the seconds they were given
    in (the action's, or the conversation's ``decide_timeout``): what the domain answered, so a replay answers
    the same. ``ruled`` is what the application's rules for whether to ask said of it, when a rule had an opinion:
    ``approve`` runs it without asking (unless a ``policy`` names who must approve it), ``deny`` ends it
    ``dismissed`` with the rule's reason, ``ask`` (or a rule that failed) puts it to the person.
    ``precondition`` says the domain checks its premise while it waits (before it runs, and every
    ``recheck_every`` seconds it is deferred): as the domain declared the action, so a replay checks the same.
    """

    type: ClassVar[str] = "suggestion"
    id: str
    action: str
    text: str
    payload: Any
    preview: str
    destructive: bool
    mutates: bool
    # Made by a factory so that it is always written, as it was before the event omitted its defaults.
    handoff: bool = msgspec.field(default_factory=bool)
    done_before: str | None = None
    deadline: float | None = None
    policy: ApprovalPolicy | None = None
    asked_by: str | None = None
    remind_at: float | None = None
    escalate_at: float | None = None
    escalate_to: tuple[str, ...] = ()
    deadline_after: float | None = None
    remind_after: float | None = None
    escalate_after: float | None = None
    ruled: RuleVerdict | None = None
    precondition: bool = False
    recheck_every: float | None = None


class OutcomeEvent(_Logged, OutcomeFields, frozen=True, kw_only=True, tag="outcome", omit_defaults=True):
    """How a suggestion ended: the fields of its :class:`Outcome`, both declared once by
    :class:`~dial_runtime.language.outcomes.OutcomeFields`, kept flat so that stored logs keep one shape;
    :attr:`outcome` gives the record."""

    type: ClassVar[str] = "outcome"
    # The event of the suggestion's machine that ended it with this outcome (``lapse``: its premise no longer
    # held); None when an earlier entry ended it (a dismissal, an expiry, the third refusal), and in logs written
    # before the trigger was recorded.
    trigger: OutcomeTrigger | None = None

    @property
    def outcome(self) -> Outcome:
        """The outcome this event reports.

        Named one by one: msgspec builds a record from keywords written out a few times faster than from an
        unpacked dict, and every outcome of every call is made here (a test holds the names to the fields)."""
        return Outcome(
            id=self.id,
            action=self.action,
            status=self.status,
            preview=self.preview,
            result=self.result,
            error=self.error,
            code=self.code,
            field=self.field,
            hint=self.hint,
            edited=self.edited,
            expired=self.expired,
            reconciled=self.reconciled,
        )


class NoReplyEvent(_Logged, frozen=True, kw_only=True, tag="no-reply", omit_defaults=True):
    """The agent did not answer within the deadline; what it was not told stays owed. ``error`` says so in
    words, with ``cause``: why the agent's tries failed meanwhile, when it said; ``seconds``: the deadline's
    length, and ``call``: whether it was the call's budget of time for the agent rather than the wait for this
    reply (``None`` and false in logs written before they were recorded)."""

    type: ClassVar[str] = "no-reply"
    turn: int
    error: str
    cause: str | None = None
    seconds: float | None = None
    call: bool = False


class TurnLimitEvent(_Logged, frozen=True, kw_only=True, tag="turn-limit"):
    """``max_turns`` turns were used in one ``say``; what is owed goes with the next one."""

    type: ClassVar[str] = "turn-limit"
    turns: int


class DeclareEvent(_Logged, frozen=True, kw_only=True, tag="declare"):
    """The agent declared a fact (an unpaired ``dial-declare``); stored in ``conversation.facts``."""

    type: ClassVar[str] = "declare"
    context_key: str
    value: Any
    element: int | None = None


class PhaticEvent(_Logged, frozen=True, kw_only=True, tag="phatic"):
    """A channel signal from the agent (``session-complete`` ends the conversation)."""

    type: ClassVar[str] = "phatic"
    signal: str
    element: int | None = None


class DelegateEvent(_Logged, frozen=True, kw_only=True, tag="delegate"):
    """The agent handed something to another actor; shown, not acted on."""

    type: ClassVar[str] = "delegate"
    to: str
    intent: str | None = None
    text: str | None = None
    payload: Any = None
    element: int | None = None


class ExecuteEvent(_Logged, frozen=True, kw_only=True, tag="execute"):
    """The agent sent a step graph; shown, never run by this runtime."""

    type: ClassVar[str] = "execute"
    id: str | None = None
    steps: tuple[Step, ...] = ()
    element: int | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "steps", _steps(self.steps))


class SaidEvent(_Logged, frozen=True, kw_only=True, tag="said", omit_defaults=True):
    """A ``say`` began with these words of the person's (logged even after the conversation ended); ``by`` who
    spoke, when the caller said."""

    type: ClassVar[str] = "said"
    text: str
    by: str | None = None


class ProposedEvent(_Logged, frozen=True, kw_only=True, tag="proposed"):
    """A suggestion was read from a reply (``element``: the last element it used, its declare included);
    ``numbered`` when the runtime assigned its ``sg-N`` id."""

    type: ClassVar[str] = "proposed"
    id: str
    action: str
    payload: Any
    numbered: bool
    element: int
    text: str = ""


class AnsweredEvent(_Logged, frozen=True, kw_only=True, tag="answered"):
    """The person answered an ask; an empty answer (or ``expired``) means the question stands."""

    type: ClassVar[str] = "answered"
    ask_id: str
    text: str
    expired: bool = False
    by: str | None = None


class DecidedEvent(_Logged, frozen=True, kw_only=True, tag="decided", omit_defaults=True):
    """The person (``by``, when known) decided: ``accept``, ``dismiss``, ``edit``, ``say`` or ``expire``, through
    ``via`` when the surface says (``"web"``, ``"terminal"``; ``None``: the program's own code). An ``expire``
    ends a suggestion whose deadline passed; its ``by`` and ``via``, when set, are whose decision came too late.
    ``roles`` are the decider's, when the suggestion's approval policy names roles; ``link`` is the id of the
    single-use decision link the decision was made with (each link decides a suggestion once).

    An edit carries the payload before (``previous``) and after (``payload``); a say carries its ``text``.
    """

    type: ClassVar[str] = "decided"
    suggestion_id: str
    decision: DecisionKind
    # Made by factories, these are written even at their defaults, as they always were; ``via`` came later.
    payload: Any = msgspec.field(default_factory=_NONE)
    previous: Any = msgspec.field(default_factory=_NONE)
    text: str | None = msgspec.field(default_factory=_NONE)
    by: str | None = msgspec.field(default_factory=_NONE)
    via: str | None = None
    roles: tuple[str, ...] = ()
    link: str | None = None


class DeferredEvent(_Logged, frozen=True, kw_only=True, tag="deferred"):
    """The person will decide on a suggestion (or answer an ask) later; the call returns ``awaiting``."""

    type: ClassVar[str] = "deferred"
    subject_id: str
    kind: DeferredKind


class ApprovalRefusedEvent(_Logged, frozen=True, kw_only=True, tag="approval-refused", omit_defaults=True):
    """A decision the suggestion's policy does not take (``code``: ``unknown-decider``, ``not-a-decider``,
    ``already-approved``), by whom (holding ``roles``, when the policy names roles) and why (``hint``); the
    suggestion waits as it did. ``decision`` is what was refused when it was not an approval: a ``dismiss``, or
    a ``say`` (words that would have superseded it, through ``say`` or a decision to say something instead)."""

    type: ClassVar[str] = "approval-refused"
    suggestion_id: str
    code: str
    hint: str
    by: str | None = None
    roles: tuple[str, ...] = ()
    decision: Literal["dismiss", "say"] | None = None


class RemindedEvent(_Logged, frozen=True, kw_only=True, tag="reminded"):
    """A suggestion still waited for a decision at its reminder time: its deciders are reminded."""

    type: ClassVar[str] = "reminded"
    suggestion_id: str


class EscalatedEvent(_Logged, frozen=True, kw_only=True, tag="escalated"):
    """A suggestion still waited for a decision at its escalation time: the deciders holding ``to`` (roles) are
    called on, and may now approve it as well."""

    type: ClassVar[str] = "escalated"
    suggestion_id: str
    to: tuple[str, ...]


class ClaimedEvent(_Logged, frozen=True, kw_only=True, tag="claimed", omit_defaults=True):
    """``by`` (holding ``roles``, when the suggestion's policy names roles) claimed a suggestion waiting for a
    decision, until ``until`` (seconds since the epoch): others see who has it. Logged between calls."""

    type: ClassVar[str] = "claimed"
    suggestion_id: str
    by: str
    until: float
    roles: tuple[str, ...] = ()


class ReleasedEvent(_Logged, frozen=True, kw_only=True, tag="released"):
    """The holder of a claim on a waiting suggestion gave it back. Logged between calls."""

    type: ClassVar[str] = "released"
    suggestion_id: str
    by: str


class AssignedEvent(_Logged, frozen=True, kw_only=True, tag="assigned", omit_defaults=True):
    """``by`` (holding ``roles``) routed a suggestion waiting for a decision to ``person`` (holding
    ``person_roles``), or to the holders of ``role``, or to nobody (neither: taken back). Logged between calls."""

    type: ClassVar[str] = "assigned"
    suggestion_id: str
    by: str
    roles: tuple[str, ...] = ()
    person: str | None = None
    person_roles: tuple[str, ...] = ()
    role: str | None = None


class ApprovalWaitingEvent(_Logged, frozen=True, kw_only=True, tag="approval-waiting"):
    """An approval was taken and the policy needs more (``approvers`` so far, ``needed`` in all): the suggestion
    waits for the next, as if deferred."""

    type: ClassVar[str] = "approval-waiting"
    suggestion_id: str
    approvers: tuple[str, ...]
    needed: int


class RefusedEvent(_Logged, frozen=True, kw_only=True, tag="refused"):
    """The domain refused the payload the person accepted or edited; they see ``issue`` and decide again.

    After a refused edit ``preview`` reads the edited payload (what the person now decides on); ``None`` when the
    preview did not change (an accepted payload refused).
    """

    type: ClassVar[str] = "refused"
    suggestion_id: str
    payload: Any
    code: str | None = None
    field: str | None = None
    hint: str | None = None
    preview: str | None = None


class ActionStartedEvent(_Logged, frozen=True, kw_only=True, tag="action-started", omit_defaults=True):
    """An action is about to run with this (validated) payload; its outcome follows, unless the process dies.

    ``key`` is the run's idempotency key (see :func:`~dial_runtime.runtime.core.idempotency_key`): the domain
    gets it with the run, and recovery asks the domain what became of the run under it (``None`` in logs written
    before keys existed: recovery derives the key those runs would have had)."""

    type: ClassVar[str] = "action-started"
    suggestion_id: str
    action: str
    payload: Any
    preview: str
    edited: bool = msgspec.field(default_factory=bool)
    key: str | None = None


class FlowMovedEvent(_Logged, frozen=True, kw_only=True, tag="flow-moved"):
    """The domain's flow went from ``source`` to ``target`` on ``event``, fired by the ``done`` outcome of the
    suggestion ``suggestion_id`` (its ``action``), which the log holds just before."""

    type: ClassVar[str] = "flow-moved"
    source: str
    target: str
    event: str
    suggestion_id: str
    action: str


class ResumedEvent(_Logged, frozen=True, kw_only=True, tag="resumed", omit_defaults=True):
    """A call took up a conversation that was awaiting the person (``decide``, ``answer``, ``resume``, or
    ``expire``: deadlines passed with nobody deciding), or whose words ``say`` supersedes: then ``by`` and
    ``roles`` are the speaker's, whom the waiting suggestions' approval policies must admit."""

    type: ClassVar[str] = "resumed"
    call: ResumingCall
    by: str | None = None
    roles: tuple[str, ...] = ()


class HandledEvent(_Logged, frozen=True, kw_only=True, tag="handled"):
    """The turn's reply was handled as far as it can be now: every element (``complete``), or, for a call a dead
    process left open, up to where it stopped (the next call resumes from there)."""

    type: ClassVar[str] = "handled"
    turn: int
    complete: bool = True


class SendFailedEvent(_Logged, frozen=True, kw_only=True, tag="send-failed"):
    """``agent.send`` raised; ``say`` re-raises the error and everything owed stays owed."""

    type: ClassVar[str] = "send-failed"
    turn: int
    error: str


class ReplyRefusedEvent(_Logged, frozen=True, kw_only=True, tag="reply-refused"):
    """A reply could not be used at all; the agent is told why on the next turn."""

    type: ClassVar[str] = "reply-refused"
    turn: int
    reply_id: str
    reason: str
    element: int | None = None


class ReplyRepeatedEvent(_Logged, frozen=True, kw_only=True, tag="reply-repeated"):
    """The turn's reply, refused, is byte for byte the call's previous reply, which could not be used either: the
    call stops after it (``no-reply``) instead of telling the agent the same again, and its refusal stays owed."""

    type: ClassVar[str] = "reply-repeated"
    turn: int


class InterruptedEvent(_Logged, frozen=True, kw_only=True, tag="interrupted"):
    """A turn stopped early: cancelled by the caller, or a callback of the person's or domain's raised."""

    type: ClassVar[str] = "interrupted"
    turn: int
    reason: str


class EndedEvent(_Logged, frozen=True, kw_only=True, tag="ended"):
    """The conversation ended (the agent's ``session-complete``, ``end()``, or the domain's flow reaching a final
    state, whose name is then the conversation's ``result``); later words are only logged."""

    type: ClassVar[str] = "ended"
    reason: str
    result: str | None = None


class FinishedEvent(_Logged, frozen=True, kw_only=True, tag="finished"):
    """A call finished with this status (a ``TurnResult`` status, ``awaiting`` or ``interrupted``)."""

    type: ClassVar[str] = "finished"
    status: CallStatus
    turns: int


Event = (
    SentEvent
    | ReplyEvent
    | ReplyStartedEvent
    | ReplyProgressEvent
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
    | ApprovalRefusedEvent
    | ApprovalWaitingEvent
    | RemindedEvent
    | EscalatedEvent
    | ClaimedEvent
    | ReleasedEvent
    | AssignedEvent
    | RefusedEvent
    | ActionStartedEvent
    | FlowMovedEvent
    | ResumedEvent
    | HandledEvent
    | SendFailedEvent
    | ReplyRefusedEvent
    | ReplyCutEvent
    | ReplyRepeatedEvent
    | UnconfirmedEvent
    | InterruptedEvent
    | EndedEvent
    | FinishedEvent
)

EVENT_TYPES: dict[str, type[Event]] = {cls.type: cls for cls in get_args(Event)}


def _words(kind: Any) -> tuple[str, ...]:
    """The words a field's type allows: those of the ``Literal`` it is, or of the ones its union holds."""
    if get_origin(kind) is Literal:
        return get_args(kind)
    return tuple(word for member in get_args(kind) for word in _words(member))


#: The fields of a fixed vocabulary, by event type and field name, with the words each may hold (read from the
#: fields' ``Literal`` types, which decoding checks).
VOCABULARIES: dict[str, dict[str, frozenset[str]]] = {
    kind: {field.name: frozenset(words) for field in msgspec.structs.fields(cls) if (words := _words(field.type))}
    for kind, cls in EVENT_TYPES.items()
}

_NOT_A_WORD = re.compile(r"Invalid enum value (?P<word>.*) - at `\$\.(?P<field>\w+)`")


def vocabulary_refusal(message: str, kind: str) -> str | None:
    """msgspec's refusal of an event's field (``message``, its path from the event: `` - at `$.status` ``) in
    the log's words when the field holds a word outside its vocabulary (``status 'exploded' is not one of done,
    ...``); ``None`` for any other refusal."""
    found = _NOT_A_WORD.fullmatch(message)
    if found is None or found["field"] not in VOCABULARIES.get(kind, {}):
        return None
    words = VOCABULARIES[kind][found["field"]]
    return f"{found['field']} {found['word']} is not one of {', '.join(sorted(words))}"


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
        "reminded",
        "escalated",
        "claimed",
        "released",
        "assigned",
        "unconfirmed",
    }
)


class InformDeltaEvent(msgspec.Struct, frozen=True, kw_only=True):
    """Text of a streamed reply as it arrives, for the person to read before it is complete; never on the log.

    ``act`` is ``prose`` (``element`` -1 before the envelope, -2 after it), ``inform`` or ``acknowledge``
    (``element`` the element's index). It comes in the order the person reads the reply: the text of an element
    only once everything before it was shown, so an element still arriving while the person decides on an earlier
    one shows whole later. The deltas of one element, concatenated, begin its ``inform``'s text (they are all of
    it, but for text the early reading could not yet tell from markup); that ``inform`` follows and completes it,
    and a surface shows only what the deltas had not.
    """

    type: ClassVar[str] = "inform-delta"
    text: str
    act: TextAct
    element: int


class LogEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a conversation's log: its 1-based sequence number, wall-clock time, and the event."""

    seq: int
    time: float
    event: Event


def _lists(value: Any) -> Any:
    """``msgspec.to_builtins``'s output as JSON gives it back: tuples (options, steps, yields) become lists."""
    if isinstance(value, dict):
        return {name: _lists(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(item) for item in value]
    return value


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as JSON-ready data: its tagged form, ``type`` first, then every field.

    A field added after logs were first written is left out while it holds its default (``sent``'s
    ``message_id``), so a log written before it reads and writes back byte for byte as it was.
    """
    data: dict[str, Any] = _lists(msgspec.to_builtins(event))
    return data


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """The event :func:`event_to_dict` made, every field checked against its declared type.

    ``ValueError`` for an unknown type; ``msgspec.ValidationError`` (a ``ValueError``) for an unknown field, a
    missing one, one of the wrong type or a word outside its field's vocabulary, naming it.
    """
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise ValueError(f"unknown event type {kind!r}")
    try:
        return msgspec.convert({"event": data}, _Carried).event
    except msgspec.ValidationError as error:  # said of the event itself, not of the record that carried it
        where = str(error).replace(" - at `$.event`", "").replace("`$.event", "`$")
        raise msgspec.ValidationError(vocabulary_refusal(where, kind) or where) from None


class _Carried(msgspec.Struct):
    """An event inside a record: msgspec keeps the decoder of a Struct's fields, but builds the decoder of a bare
    union anew for each call (0.8 against 47 microseconds an event)."""

    event: Event


def entry_to_dict(entry: LogEntry) -> dict[str, Any]:
    """A log entry as JSON-ready data."""
    return {"seq": entry.seq, "time": entry.time, "event": event_to_dict(entry.event)}


def entry_from_dict(data: Mapping[str, Any]) -> LogEntry:
    """The log entry :func:`entry_to_dict` made; :class:`~dial_runtime.LogError` naming the entry when its event
    is not one the runtime writes (whether the log's entries follow one another is the fold's question)."""
    seq, event = data["seq"], data["event"]
    try:
        return LogEntry(seq=seq, time=data["time"], event=event_from_dict(event))
    except ValueError as error:
        kind = event.get("type") if isinstance(event, Mapping) else None
        raise LogError(seq, kind if isinstance(kind, str) else None, str(error)) from None
