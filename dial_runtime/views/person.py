"""What a person sees of a conversation, as a pure and incremental function of its log: the one reading of the
log every surface renders from (the transcript, the web's live stream and its snapshot, ``dial-runtime log``).

Feed a :class:`Projection` log entries (or bare events, as ``on_event`` sees them) one at a time or all at once;
feeding a log in pieces gives what feeding it whole gives. It holds, in order:

- :class:`PersonWords`: the person's words (said, an answer to an ask, words given instead of deciding);
- :class:`AgentText`: the agent's prose, informs and acknowledgements; :class:`Question`: its asks;
- :class:`Card`: one per suggestion shown to the person, kept current: the payload that waits (or ran), its status
  (as the suggestion lifecycle has it), the outcome in words, who decided and when, the edits refused;
- :class:`RefusedProposal`: a proposal that never became a card (refused by the runtime, or overtaken);
- :class:`Notice`: why something stopped (no reply, turn limit, a deadline, a cut reply, a repeated unusable
  reply, an interruption, a failed send); :class:`Aside`: the elements shown but not acted on; :class:`Told`:
  what a message told the agent.

:attr:`Projection.trail` is the audit trail (:class:`Moment`: what happened, to what, who decided), and
:attr:`Projection.waiting` what waits for the person. No I/O: nothing here is on the runtime's path unless a
surface builds one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol

import msgspec

from ..errors import AlreadyDecided, DialSizeError, NotWaiting
from ..language.outcomes import Outcome
from ..language.parser import parse
from ..language.records import Option
from ..runtime.core import DENIED_BY_RULE
from ..runtime.events import (
    RENDERED,
    ActionStartedEvent,
    AnsweredEvent,
    ApprovalRefusedEvent,
    ApprovalWaitingEvent,
    AskEvent,
    AssignedEvent,
    ClaimedEvent,
    DecidedEvent,
    DeclareEvent,
    DeferredEvent,
    DelegateEvent,
    EndedEvent,
    EscalatedEvent,
    Event,
    ExecuteEvent,
    FinishedEvent,
    FlowMovedEvent,
    InformDeltaEvent,
    InformEvent,
    InterruptedEvent,
    LogEntry,
    NoReplyEvent,
    OutcomeEvent,
    PhaticEvent,
    ProposedEvent,
    RefusedEvent,
    ReleasedEvent,
    RemindedEvent,
    ReplyCutEvent,
    ReplyEvent,
    ReplyRefusedEvent,
    ReplyRepeatedEvent,
    ReplyStartedEvent,
    ResumedEvent,
    SaidEvent,
    SendFailedEvent,
    SentEvent,
    SuggestionEvent,
    TurnLimitEvent,
    UnconfirmedEvent,
)
from ..runtime.records import ApprovalPolicy, Issue, RuleVerdict, payload_digest
from ..runtime.state import claim_holder, shown_state
from ..statemachines.suggestion import DECIDING as SUGGESTION_DECIDING

__all__ = [
    "AgentText",
    "Aside",
    "Card",
    "CardDecision",
    "CardStatus",
    "EditRefusal",
    "Item",
    "Moment",
    "Notice",
    "PersonWords",
    "Projection",
    "Question",
    "RefusedProposal",
    "Told",
    "Waiting",
    "approval_refused",
    "holding_words",
    "outcome_words",
    "project",
    "ruled_words",
    "stopped_in_words",
    "why_asked",
]

#: Where a card's suggestion stands: waiting for the person (``pending``, or ``deferred-waiting`` once the person
#: chose to decide later), ``running``, or how it ended (an outcome's status).
CardStatus = Literal[
    "pending", "deferred-waiting", "running", "done", "failed", "dismissed", "superseded", "invalid", "handed-off"
]

#: The statuses of a card that waits for the person's decision.
DECIDING: frozenset[str] = frozenset({"pending", "deferred-waiting"})


def shown_live(event: Event) -> bool:
    """Whether a surface renders ``event``: ``on_event`` is shown it as it is recorded (the others exist for the
    log: state, audit, replay)."""
    return event.type in RENDERED


def not_waiting(entries: Iterable[LogEntry], refused: NotWaiting) -> NotWaiting:
    """What to tell of a decision or answer whose subject is not waiting: :class:`AlreadyDecided` (by whom,
    how) when the log shows it ended, else the refusal itself."""
    return project(entries).already_decided(refused.subject_id) or refused


class _Item(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """What every item shares: the log entry it comes from (``None`` for a bare event) and its time."""

    seq: int | None = None
    time: float | None = None


class PersonWords(_Item, frozen=True, kw_only=True, tag="words"):
    """The person's words: ``said`` (a ``say``), an ``answer`` to the ask ``subject_id``, or words given
    ``instead`` of deciding on the suggestion ``subject_id``; ``by`` who, when the log says."""

    text: str
    how: Literal["said", "answer", "instead"] = "said"
    by: str | None = None
    subject_id: str | None = None


class AgentText(_Item, frozen=True, kw_only=True, tag="text"):
    """The agent's text: prose (``act`` ``None``), an ``inform`` or an ``acknowledge``; ``element`` as the
    ``inform`` event's. ``unconfirmed`` says why an acknowledgement contradicts the log: a surface shows it as the
    agent's own claim, marked as not confirmed, never as an outcome."""

    text: str
    act: str | None = None
    element: int | None = None
    unconfirmed: str | None = None


class Question(_Item, frozen=True, kw_only=True, tag="question"):
    """An ask: its question and choices, and where it stands: ``asked`` (put to the person now), ``shown``
    (not put: the person had said something else), ``waiting`` (to be answered later), ``answered``
    (``answer``, ``answered_by``), ``open`` (no answer given: the question stands) or ``expired``."""

    id: str
    text: str
    response_type: str = "text"
    options: tuple[Option, ...] = ()
    timeout: float | None = None
    element: int | None = None
    status: Literal["asked", "shown", "waiting", "answered", "open", "expired"] = "asked"
    answer: str | None = None
    answered_by: str | None = None


class EditRefusal(msgspec.Struct, frozen=True, kw_only=True):
    """The domain refused the payload the person accepted or edited (``payload``), and why; ``preview`` is the
    domain's words for a refused edit (``None`` for an accepted payload refused)."""

    payload: Any
    preview: str | None = None
    code: str | None = None
    field: str | None = None
    hint: str | None = None
    seq: int | None = None
    time: float | None = None


class CardDecision(msgspec.Struct, frozen=True, kw_only=True):
    """One decision on a card: ``decision`` (``accept``, ``dismiss``, ``edit``, ``say``, ``expire``), ``by`` whom
    and ``via`` which surface when the log says, the edited ``payload`` or the words said instead (``text``)."""

    decision: str
    by: str | None = None
    via: str | None = None
    payload: Any = None
    text: str | None = None
    seq: int | None = None
    time: float | None = None


class Card(_Item, frozen=True, kw_only=True, tag="card"):
    """A suggestion shown to the person (``seq`` and ``time``: when), kept current as it goes on.

    ``text`` is the agent's own words for it, ``preview`` the domain's (as it was shown, kept after an edit the
    domain refused, whose own words are its refusal's; once it ran, what ran); ``proposed`` the payload shown
    first, ``payload`` the one that waits (after an edit the edited one, after a refused edit the refused one, with
    ``issue``) or, once it ran, the one that ran. ``decision``, ``decided_by`` and ``decided_at`` are the last
    decision on it; ``refusals`` every edit refused. Once it ended, ``outcome`` says how in words, ``result`` is
    the result as JSON text, ``reported`` the outcome the agent was told, and ``ended_seq``/``ended_at`` when.
    ``done_before`` names the suggestion that already did the same (action and payload) in this conversation, and
    ``done_at`` is when it was done (``None`` when the log fed does not hold it): a surface marks the card.
    ``decisions`` is every decision on it in order (``decided_via`` the last one's surface); ``run_key`` and
    ``started_at`` are its run's idempotency key and start, once it ran. Under an approval policy,
    ``approvals_needed`` is how many people must approve it and ``approvers`` who has (a surface shows "1 of 2
    approvals"), and ``approval_refused`` the last approval the policy did not take, in words; ``reminded`` and
    ``escalated_to`` say its deciders were reminded, and to which roles it escalated. ``deadline`` is when the
    time to decide on it ends (seconds since the epoch), when it does. While it waits, ``claimed_by`` is who
    claimed it last and ``claimed_until`` when that claim ends (a surface shows the claim until then), and
    ``assigned_to`` the person or ``assigned_role`` the role it is assigned to. ``ruled`` is what the
    application's rules for whether to ask said of it, when one had an opinion, and ``ruled_words`` a rule's
    decision in words (``Approved by rule small-refunds@2``); ``why_asked`` says why a person decides it, for a
    card that waits (:func:`why_asked`).
    """

    id: str
    action: str
    text: str = ""
    preview: str = ""
    destructive: bool = False
    mutates: bool = True
    handoff: bool = False
    proposed: Any = None
    payload: Any = None
    status: CardStatus = "pending"
    issue: Issue | None = None
    refusals: tuple[EditRefusal, ...] = ()
    decision: str | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    outcome: str = ""
    result: str | None = None
    reported: Outcome | None = None
    ended_seq: int | None = None
    ended_at: float | None = None
    done_before: str | None = None
    done_at: float | None = None
    decisions: tuple[CardDecision, ...] = ()
    decided_via: str | None = None
    run_key: str | None = None
    started_at: float | None = None
    approvals_needed: int = 0
    approvers: tuple[str, ...] = ()
    approval_refused: str | None = None
    reminded: bool = False
    escalated_to: tuple[str, ...] = ()
    deadline: float | None = None
    claimed_by: str | None = None
    claimed_until: float | None = None
    assigned_to: str | None = None
    assigned_role: str | None = None
    ruled: RuleVerdict | None = None
    ruled_words: str = ""
    why_asked: str = ""

    def holder(self, now: float) -> str | None:
        """Who holds a claim on it at ``now`` (``None``: nobody, or the claim's time ran out)."""
        return claim_holder(self.claimed_by, self.claimed_until, now)

    @property
    def waiting(self) -> bool:
        """Whether the card waits for the person's decision."""
        return self.status in DECIDING

    @property
    def digest(self) -> str:
        """:func:`~dial_runtime.runtime.records.payload_digest` of the action and the payload shown now."""
        return payload_digest(self.action, self.payload)


class RefusedProposal(_Item, frozen=True, kw_only=True, tag="refused"):
    """A proposal the person never saw as a card: ``invalid`` (an unknown action, a payload the domain refused,
    with ``code``, ``field``, ``hint``) or ``superseded`` (overtaken before it was shown); ``outcome`` in words."""

    id: str
    action: str
    payload: Any = None
    preview: str = ""
    status: str = "invalid"
    error: str | None = None
    code: str | None = None
    field: str | None = None
    hint: str | None = None
    outcome: str = ""

    @property
    def refused(self) -> bool:
        """Whether the runtime refused it (``invalid``), rather than the person's words overtaking it."""
        return self.status == "invalid"


class Notice(_Item, frozen=True, kw_only=True, tag="notice"):
    """Why something stopped, for the person: ``what`` happened, ``text`` in words, the ``turn`` and the
    suggestion or ask (``subject_id``) it concerns, and the event's own fields as JSON data (``data``)."""

    what: Literal[
        "no-reply", "turn-limit", "deadline", "reply-refused", "reply-repeated", "interrupted", "send-failed"
    ]
    text: str
    turn: int | None = None
    subject_id: str | None = None
    data: dict[str, Any] = {}


class Aside(_Item, frozen=True, kw_only=True, tag="aside"):
    """An element the runtime shows but does not act on (``declare``, ``phatic``, ``delegate``, ``execute``):
    ``text`` in words (empty when there is nothing to say), the event's fields as JSON data (``data``)."""

    what: Literal["declare", "phatic", "delegate", "execute"]
    text: str = ""
    data: dict[str, Any] = {}


class Told(_Item, frozen=True, kw_only=True, tag="told"):
    """A message went to the agent (``turn``), reporting these outcomes (``sg-1:done``, ...)."""

    turn: int
    reports: tuple[str, ...] = ()


#: Anything the person sees: a tagged union (``kind``), so ``msgspec.json.encode`` writes any item and
#: ``msgspec.json.decode(..., type=Item)`` reads it back.
Item = PersonWords | AgentText | Question | Card | RefusedProposal | Notice | Aside | Told


class Moment(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the audit trail: what happened (``label``), to which suggestion or ask and who decided
    (``text``), from the entry ``seq`` at ``time``."""

    label: str
    text: str
    seq: int | None = None
    time: float | None = None


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """A suggestion or ask waiting for the person: ``deferred`` once they chose to decide later; a suggestion's
    ``digest`` (of the payload waiting) and its ``refusals`` (refused edits so far)."""

    id: str
    kind: Literal["suggestion", "ask"]
    deferred: bool = False
    digest: str | None = None
    refusals: int = 0


#: What ``log`` says of a turn or an action the runtime stopped, by the start of the reason it recorded.
_CANCELLED = "cancelled before it finished (Ctrl-C in chat, or the caller's cancellation)"
_STOPPED = (
    ("the process stopped", "the process stopped"),
    ("the process exited", "the process exited"),
    ("the person said something else", "the person said something else"),
    ("the call was cancelled", _CANCELLED),
    ("interrupted by the person (Ctrl-C)", "cancelled by the person (Ctrl-C)"),
    ("KeyboardInterrupt", "cancelled by the person (Ctrl-C)"),
    ("CancelledError", _CANCELLED),
    ("Cancelled", _CANCELLED),
    ("TimeoutError", "the deadline passed"),
    ("TooSlowError", "the deadline passed"),
)

#: How a superseded suggestion is said to have ended when the person's words overtook it.
SAID_ELSE = "Superseded: the person said something else"


def stopped_in_words(reason: str) -> str:
    """Why a turn or an action stopped, as a person reads it. The runtime words it (``the call was cancelled``);
    logs written before recorded the exception that stopped it (``CancelledError: Cancelled via cancel scope
    7ff...``): this keeps what it meant and drops the machinery."""
    for start, words in _STOPPED:
        if reason == start or reason.startswith((f"{start}:", f"{start} ")):
            return words
    return reason


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def outcome_words(outcome: Outcome, *, said_else: bool = False) -> str:
    """How a suggestion ended, as a short sentence: ``Done``, ``Failed: <error>``, ``Dismissed``, ``Expired``,
    ``Superseded`` (``said_else``: the person's words overtook it), ``Invalid: <hint>``, ``Handed off``."""
    status = outcome.status
    if status == "done":
        return "Done"
    if status == "failed":
        error = outcome.error
        if error and outcome.code == "interrupted":
            error = stopped_in_words(error)
        return f"Failed: {error}" if error else "Failed"
    if status == "dismissed":
        if outcome.code == DENIED_BY_RULE:
            return f"Denied: {outcome.hint}"
        return "Expired" if outcome.expired else "Dismissed"
    if status == "superseded":
        return SAID_ELSE if said_else else "Superseded"
    if status == "invalid":
        reason = outcome.hint or outcome.error or outcome.code
        return f"Invalid: {reason}" if reason else "Invalid"
    if status == "handed-off":
        return "Handed off"
    return status.capitalize()


def why_asked(ruled: RuleVerdict | None, policy: ApprovalPolicy | None) -> str:
    """Why a person decides a waiting suggestion, in words: the rule that asked (or that failed), else its
    approval policy; ``""`` when neither (every action that changes something is put to a person)."""
    if ruled is not None and ruled.kind == "ask":
        if ruled.error is not None:
            return f"rule {ruled.rule} failed ({ruled.error}), so a person decides"
        return f"rule {ruled.rule} asks a person"
    if policy is not None:
        roles = f" from {', '.join(sorted(policy.roles))}" if policy.roles else ""
        needs = (
            f"its approval policy needs {policy.approvals} approval{'s' if policy.approvals > 1 else ''}{roles}"
        )
        if ruled is not None and ruled.kind == "approve":
            return f"rule {ruled.rule} would approve it, but {needs}"
        return needs
    return ""


def ruled_words(ruled: RuleVerdict) -> str:
    """What a rule decided of a suggestion without asking, in words: ``Approved by rule small-refunds@2`` or
    ``Denied by rule weekend-purges@1`` (its reason is the outcome's: ``Denied: purges wait for Monday``);
    ``""`` for a rule that asked."""
    if ruled.kind == "approve":
        return f"Approved by rule {ruled.rule}"
    if ruled.kind == "deny":
        return f"Denied by rule {ruled.rule}"
    return ""


def _fields(event: Event) -> dict[str, Any]:
    """An event's fields as JSON-ready data, without its type."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    data.pop("type", None)
    return data


class _Held(Protocol):
    """A card that says who holds it (read only, as frozen records are)."""

    @property
    def assigned_to(self) -> str | None: ...
    @property
    def assigned_role(self) -> str | None: ...
    @property
    def claimed_until(self) -> float | None: ...
    def holder(self, now: float) -> str | None: ...


def holding_words(card: _Held, now: float) -> str | None:
    """Who holds a waiting card (a :class:`Card` or an inbox's card) at ``now``, in words: ``claimed by ana
    until 10:15, assigned to finance`` (local time), each part only when it holds; ``None`` when nobody does."""
    parts = []
    holder = card.holder(now)
    if holder is not None:
        assert card.claimed_until is not None
        parts.append(f"claimed by {holder} until {time.strftime('%H:%M', time.localtime(card.claimed_until))}")
    if card.assigned_to or card.assigned_role:
        parts.append(f"assigned to {card.assigned_to or card.assigned_role}")
    return ", ".join(parts) or None


def _clock(seconds: float) -> str:
    """A time of the log in UTC, to the second (``2026-12-06T10:15:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _by(by: str | None) -> str:
    return f" by {by}" if by else ""


class Projection:
    """The projection of one conversation's log, fed entry by entry (:meth:`feed`).

    ``shown`` names suggestions shown earlier than what is fed (a recap of a session whose log is not fed): an
    outcome of one of them is the end of a card, never a refused proposal. :attr:`shown` holds every card's id.
    """

    def __init__(self, shown: Iterable[str] = ()) -> None:
        self.shown: set[str] = set(shown)
        self.fed = 0  # the seq of the last entry fed
        self._items: list[Item] = []
        self._trail: list[Moment] = []
        self._cards: dict[str, int] = {}
        self._questions: dict[str, int] = {}
        self._proposed: dict[str, ProposedEvent] = {}
        self._decided: dict[str, AlreadyDecided] = {}
        self._ended: dict[str, str] = {}
        self._said_else: set[str] = set()  # suggestions the person's words overtook
        self._open: set[str] = set()  # suggestions without an outcome yet
        self._instead = False
        self._unconfirmed: UnconfirmedEvent | None = None  # the contradiction the next inform is marked with
        self._changed: dict[int, None] = {}  # the indices of the items the entry being fed added or changed
        self._last: dict[int, None] = {}
        self._seq: int | None = None
        self._time: float | None = None

    # Feeding ---------------------------------------------------------------------------------------------------

    def feed(self, record: LogEntry | Event | InformDeltaEvent) -> tuple[Item, ...]:
        """Take one log entry (or a bare event); returns the items it added or changed, as they are now. An entry
        fed already (its seq not past :attr:`fed`) and text still arriving (``inform-delta``) change nothing."""
        self._last = {}
        if isinstance(record, LogEntry):
            if record.seq <= self.fed:
                return ()
            self.fed = record.seq
            self._seq, self._time, event = record.seq, record.time, record.event
        elif isinstance(record, InformDeltaEvent):
            return ()
        else:
            self._seq, self._time, event = None, None, record
        handler = _HANDLERS.get(type(event))
        if handler is None:
            return ()
        handler(self, event)
        changed, self._changed = self._changed, {}
        self._last = changed
        return tuple(self._items[at] for at in changed)

    def feed_all(self, records: Iterable[LogEntry | Event]) -> tuple[Item, ...]:
        """Take every entry (or event) in order; returns the items added or changed, each once, as they are now."""
        changed: dict[int, None] = {}
        for record in records:
            self.feed(record)
            changed.update(self._last)
        return tuple(self._items[at] for at in changed)

    # Reading ---------------------------------------------------------------------------------------------------

    @property
    def items(self) -> tuple[Item, ...]:
        """What the person sees, in order (a card where it was first shown, as it is now)."""
        return tuple(self._items)

    @property
    def trail(self) -> tuple[Moment, ...]:
        """The audit trail: a line for each entry a reviewer needs (not the agent's words, not bookkeeping)."""
        return tuple(self._trail)

    @property
    def waiting(self) -> tuple[Waiting, ...]:
        """The suggestions and asks waiting for the person, in the order they were shown."""
        found: list[Waiting] = []
        for item in self._items:
            if isinstance(item, Card) and item.waiting:
                deferred = item.status == "deferred-waiting"
                found.append(
                    Waiting(
                        id=item.id,
                        kind="suggestion",
                        deferred=deferred,
                        digest=item.digest,
                        refusals=len(item.refusals),
                    )
                )
            elif isinstance(item, Question) and item.status in ("asked", "waiting"):
                found.append(Waiting(id=item.id, kind="ask", deferred=item.status == "waiting"))
        return tuple(found)

    def card(self, suggestion_id: str) -> Card | None:
        """The card of a suggestion shown to the person, as it is now."""
        at = self._cards.get(suggestion_id)
        item = None if at is None else self._items[at]
        return item if isinstance(item, Card) else None

    def refusals(self, suggestion_id: str) -> int:
        """The edits refused since the suggestion was shown (0 for one never shown)."""
        card = self.card(suggestion_id)
        return 0 if card is None else len(card.refusals)

    def already_decided(self, subject_id: str) -> AlreadyDecided | None:
        """How a suggestion or ask that no longer waits ended: the last decision on it (who and how),
        ``answered`` for an ask answered, else its outcome's status; ``None`` when the log never ended it."""
        decided = self._decided.get(subject_id)
        if decided is not None:
            return decided
        status = self._ended.get(subject_id)
        return None if status is None else AlreadyDecided(subject_id, by=None, how=status)

    # The handlers ----------------------------------------------------------------------------------------------

    def _add(self, item: Item) -> None:
        if isinstance(item, Card):
            self._cards[item.id] = len(self._items)
        elif isinstance(item, Question):
            self._questions[item.id] = len(self._items)
        self._changed[len(self._items)] = None
        self._items.append(item)

    def _update(self, at: int, **changes: Any) -> None:
        self._items[at] = msgspec.structs.replace(self._items[at], **changes)
        self._changed[at] = None

    def _card_at(self, at: int) -> Card:
        card = self._items[at]
        assert isinstance(card, Card)
        return card

    def _label(self, subject_id: str) -> str:
        """A card or question as a person knows it, in a sentence: the domain's preview of the card (else its
        action), the question's words (shortened), quoted; never its id, unless the log shows it nothing else."""
        at = self._cards.get(subject_id, self._questions.get(subject_id))
        item = None if at is None else self._items[at]
        if isinstance(item, Card):
            words = item.preview or item.action
        elif isinstance(item, Question):
            words = item.text if len(item.text) <= 80 else item.text[:79] + "…"
        else:
            words = subject_id
        return f"“{words}”"

    def _moment(self, label: str, text: str) -> None:
        self._trail.append(Moment(label=label, text=text, seq=self._seq, time=self._time))

    def _notice(
        self, event: Event, what: Any, text: str, *, turn: int | None, subject_id: str | None = None
    ) -> None:
        self._add(
            Notice(
                what=what,
                text=text,
                turn=turn,
                subject_id=subject_id,
                data=_fields(event),
                seq=self._seq,
                time=self._time,
            )
        )

    def _set_aside(self) -> None:
        """The person's words overtake every suggestion still open."""
        self._said_else |= self._open

    def _said(self, event: SaidEvent) -> None:
        self._moment("said", _json_text(event.text))
        if event.text:
            self._set_aside()
            self._add(PersonWords(text=event.text, how="said", by=event.by, seq=self._seq, time=self._time))

    def _resumed(self, event: ResumedEvent) -> None:
        self._moment("resumed", f"with {event.call}()")

    def _reply(self, event: ReplyEvent | ReplyStartedEvent) -> None:
        self._instead = False

    def _inform(self, event: InformEvent) -> None:
        unconfirmed, self._unconfirmed = self._unconfirmed, None
        if unconfirmed is not None and unconfirmed.element != event.element:
            unconfirmed = None
        self._add(
            AgentText(
                text=event.text,
                act=event.act,
                element=event.element,
                unconfirmed=None if unconfirmed is None else unconfirmed.reason,
                seq=self._seq,
                time=self._time,
            )
        )

    def _unconfirmed_event(self, event: UnconfirmedEvent) -> None:
        self._moment("not confirmed", f"the agent's acknowledgement: {event.reason}")
        self._unconfirmed = event

    def _ask(self, event: AskEvent) -> None:
        options = ", ".join(option.value for option in event.options)
        unasked = "" if event.asked else " [not put to the person]"
        kinds = f"{event.response_type}: {options}" if options else event.response_type
        self._moment("asked", f"{event.id} {_json_text(event.text)} ({kinds}){unasked}")
        self._add(
            Question(
                id=event.id,
                text=event.text,
                response_type=event.response_type,
                options=event.options,
                timeout=event.timeout,
                element=event.element,
                status="asked" if event.asked else "shown",
                seq=self._seq,
                time=self._time,
            )
        )

    def _answered(self, event: AnsweredEvent) -> None:
        at = self._questions.get(event.ask_id)
        if event.expired:
            self._moment("answered", f"{event.ask_id}: no answer in time")
            if at is not None:
                self._update(at, status="expired")
            label = self._label(event.ask_id)
            self._notice(event, "deadline", f"no answer in time to {label}", turn=None, subject_id=event.ask_id)
            return
        said = _json_text(event.text) if event.text else "nothing (the question stands)"
        self._moment("answered", f"{event.ask_id}{_by(event.by)}: {said}")
        if not event.text:
            if at is not None:
                self._update(at, status="open")
            return
        self._decided[event.ask_id] = AlreadyDecided(event.ask_id, by=event.by, how="answered")
        if at is not None:
            self._update(at, status="answered", answer=event.text, answered_by=event.by)
        self._add(
            PersonWords(
                text=event.text, how="answer", by=event.by, subject_id=event.ask_id, seq=self._seq, time=self._time
            )
        )

    def _proposed_event(self, event: ProposedEvent) -> None:
        text = f" {_json_text(event.text)}" if event.text else ""
        self._moment("proposed", f"{event.id} {event.action} {_json_text(event.payload)}{text}")
        self._proposed[event.id] = event
        self._open.add(event.id)
        if self._instead:
            self._said_else.add(event.id)

    def _suggestion(self, event: SuggestionEvent) -> None:
        marks = " [destructive]" if event.destructive else ""
        if event.handoff:
            marks += " [hand-off: runs without asking]"
        elif not event.mutates:
            marks += " [read-only: runs without asking]"
        done = None if event.done_before is None else self.card(event.done_before)
        if event.done_before is not None:
            marks += f" [already done as {event.done_before}]"
        ruled = event.ruled
        reviewed = shown_state(event)
        waits = reviewed in SUGGESTION_DECIDING
        if ruled is not None and not waits:
            marks += f" [{ruled_words(ruled).lower()}]"
        self._moment("shown", f"{event.id} {_json_text(event.preview)}{marks}")
        self.shown.add(event.id)
        self._open.add(event.id)
        self._add(
            Card(
                id=event.id,
                action=event.action,
                text=event.text,
                preview=event.preview,
                destructive=event.destructive,
                mutates=event.mutates,
                handoff=event.handoff,
                proposed=event.payload,
                payload=event.payload,
                status="pending" if waits else "dismissed" if reviewed == "dismissed" else "running",
                done_before=event.done_before,
                done_at=None if done is None else done.ended_at,
                approvals_needed=0 if event.policy is None else event.policy.approvals,
                deadline=event.deadline,
                ruled=ruled,
                ruled_words="" if ruled is None or waits else ruled_words(ruled),
                why_asked=why_asked(ruled, event.policy) if waits else "",
                seq=self._seq,
                time=self._time,
            )
        )

    def _decided_event(self, event: DecidedEvent) -> None:
        subject, decision = event.suggestion_id, event.decision
        by = _by(event.by) + (f" via {event.via}" if event.via else "")
        if decision == "edit":
            before, after = _json_text(event.previous), _json_text(event.payload)
            self._moment("decided", f"{subject} edit{by}: {before} → {after}")
        elif decision == "say":
            self._moment("decided", f"{subject} say instead{by}: {_json_text(event.text)}")
        elif decision == "expire":
            self._moment("decided", f"{subject} expired: no decision in time")
        else:
            self._moment("decided", f"{subject} {decision}{by}")
        self._decided[subject] = AlreadyDecided(subject, by=event.by, how=decision)
        at = self._cards.get(subject)
        if at is not None:
            made = CardDecision(
                decision=decision,
                by=event.by,
                via=event.via,
                payload=event.payload if decision == "edit" else None,
                text=event.text,
                seq=self._seq,
                time=self._time,
            )
            changes: dict[str, Any] = {
                "decision": decision,
                "decided_by": event.by,
                "decided_at": self._time,
                "decided_via": event.via,
                "decisions": (*self._card_at(at).decisions, made),
            }
            if decision == "edit":
                changes["payload"] = event.payload
            card = self._card_at(at)
            if card.approvals_needed and event.by and decision in ("accept", "edit"):
                changes["approvers"] = (*card.approvers, event.by) if decision == "accept" else (event.by,)
            if card.status == "deferred-waiting":
                changes["status"] = "pending"
            self._update(at, **changes)
        if decision == "say":
            self._instead = True
            self._set_aside()
            if event.text:
                self._add(
                    PersonWords(
                        text=event.text,
                        how="instead",
                        by=event.by,
                        subject_id=subject,
                        seq=self._seq,
                        time=self._time,
                    )
                )
        elif decision == "expire":
            label = self._label(subject)
            self._notice(event, "deadline", f"no decision in time on {label}", turn=None, subject_id=subject)

    def _refused(self, event: RefusedEvent) -> None:
        field = f" ({event.field})" if event.field else ""
        reason = ": ".join(part for part in (f"{event.code or ''}{field}".strip(), event.hint) if part)
        self._moment(
            "refused", f"{event.suggestion_id} {_json_text(event.payload)}: {reason or 'no reason given'}"
        )
        at = self._cards.get(event.suggestion_id)
        if at is None:
            return
        card = self._card_at(at)
        refusal = EditRefusal(
            payload=event.payload,
            preview=event.preview,
            code=event.code,
            field=event.field,
            hint=event.hint,
            seq=self._seq,
            time=self._time,
        )
        self._update(
            at,
            payload=event.payload,
            issue=Issue(code=event.code, field=event.field, hint=event.hint),
            refusals=(*card.refusals, refusal),
            status="pending",
        )

    def _deferred(self, event: DeferredEvent) -> None:
        self._moment("deferred", f"{event.kind} {event.subject_id}")
        at = (self._cards if event.kind == "suggestion" else self._questions).get(event.subject_id)
        if at is not None:
            self._update(at, status="deferred-waiting" if event.kind == "suggestion" else "waiting")

    def _approval_waiting(self, event: ApprovalWaitingEvent) -> None:
        approvers = ", ".join(event.approvers)
        self._moment("approval", f"{event.suggestion_id} {len(event.approvers)} of {event.needed} ({approvers})")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(at, status="deferred-waiting", approval_refused=None)

    def _reminded(self, event: RemindedEvent) -> None:
        self._moment("reminded", f"{event.suggestion_id} still waits: its deciders are reminded")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(at, reminded=True)

    def _escalated(self, event: EscalatedEvent) -> None:
        self._moment("escalated", f"{event.suggestion_id} escalated to {', '.join(event.to)}")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(at, escalated_to=event.to)

    def _claimed(self, event: ClaimedEvent) -> None:
        self._moment("claimed", f"{event.suggestion_id} by {event.by} until {_clock(event.until)}")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(at, claimed_by=event.by, claimed_until=event.until)

    def _released(self, event: ReleasedEvent) -> None:
        self._moment("released", f"{event.suggestion_id} by {event.by}")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(at, claimed_by=None, claimed_until=None)

    def _assigned(self, event: AssignedEvent) -> None:
        to = event.person or (f"role {event.role}" if event.role else "nobody")
        self._moment("assigned", f"{event.suggestion_id} to {to}{_by(event.by)}")
        at = self._cards.get(event.suggestion_id)
        if at is None:
            return
        changes: dict[str, Any] = {"assigned_to": event.person, "assigned_role": event.role}
        if event.person is not None and self._card_at(at).claimed_by != event.person:
            changes.update(claimed_by=None, claimed_until=None)  # an assignment to a person ends another's claim
        self._update(at, **changes)

    def _approval_refused(self, event: ApprovalRefusedEvent) -> None:
        self._moment("approval refused", f"{event.suggestion_id}{_by(event.by)}: {event.code}: {event.hint}")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(at, approval_refused=event.hint)

    def _action_started(self, event: ActionStartedEvent) -> None:
        edited = " (edited)" if event.edited else ""
        self._moment("run", f"{event.suggestion_id} {event.action} {_json_text(event.payload)}{edited}")
        at = self._cards.get(event.suggestion_id)
        if at is not None:
            self._update(
                at,
                status="running",
                payload=event.payload,
                preview=event.preview,
                issue=None,
                run_key=event.key,
                started_at=self._time,
            )

    def _flow_moved(self, event: FlowMovedEvent) -> None:
        moved = f"{event.source} → {event.target} on {event.event}"
        self._moment("flow moved", f"{moved} ({event.suggestion_id} {event.action} done)")

    def _outcome(self, event: OutcomeEvent) -> None:
        parts = [event.id, event.status]
        if event.result is not None:
            parts.append(_json_text(event.result))
        error = stopped_in_words(event.error) if event.code == "interrupted" and event.error else event.error
        named = {"error": error, "code": event.code, "field": event.field, "hint": event.hint}
        parts.extend(f"{name}={_json_text(value)}" for name, value in named.items() if value)
        flags = (("edited", event.edited), ("expired", event.expired), ("reconciled", event.reconciled))
        parts.extend(flag for flag, value in flags if value)
        self._moment("outcome", " ".join(parts))
        self._ended[event.id] = event.status
        self._open.discard(event.id)
        outcome = event.outcome
        words = outcome_words(outcome, said_else=event.id in self._said_else)
        at = self._cards.get(event.id)
        if at is None and event.id in self.shown:  # shown before what was fed: the card is rebuilt from its end
            self._add(
                Card(
                    id=event.id,
                    action=event.action,
                    preview=event.preview,
                    status="pending",
                    seq=self._seq,
                    time=self._time,
                )
            )
            at = self._cards[event.id]
        if at is None:
            proposed = self._proposed.get(event.id)
            self._add(
                RefusedProposal(
                    id=event.id,
                    action=event.action,
                    payload=None if proposed is None else proposed.payload,
                    preview=event.preview,
                    status=event.status,
                    error=event.error,
                    code=event.code,
                    field=event.field,
                    hint=event.hint,
                    outcome=words,
                    seq=self._seq,
                    time=self._time,
                )
            )
            return
        self._update(
            at,
            status=event.status,
            preview=event.preview or self._card_at(at).preview,
            outcome=words,
            result=None if event.result is None else _json_text(event.result),
            reported=outcome,
            ended_seq=self._seq,
            ended_at=self._time,
        )

    def _sent(self, event: SentEvent) -> None:
        try:
            envelope = parse(event.message, schema=False)
        except DialSizeError:  # over the parser's limits: nothing in it can be read as a report
            envelope = None
        reports = tuple(token for element in (envelope.elements if envelope else ()) for token in element.yields)
        self._moment("sent", f"turn {event.turn}" + (f", reporting {', '.join(reports)}" if reports else ""))
        self._add(Told(turn=event.turn, reports=reports, seq=self._seq, time=self._time))

    def _interrupted(self, event: InterruptedEvent) -> None:
        words = stopped_in_words(event.reason)
        self._moment("interrupted", f"turn {event.turn}: {words}")
        self._notice(event, "interrupted", f"the agent's turn stopped: {words}", turn=event.turn)

    def _no_reply(self, event: NoReplyEvent) -> None:
        self._moment("no reply", f"turn {event.turn}: {event.error}")
        self._notice(event, "no-reply", f"no reply: {event.error}", turn=event.turn)

    def _send_failed(self, event: SendFailedEvent) -> None:
        self._moment("send failed", f"turn {event.turn}: {event.error}")
        self._notice(event, "send-failed", f"the message could not be sent: {event.error}", turn=event.turn)

    def _reply_refused(self, event: ReplyRefusedEvent) -> None:
        self._moment("reply refused", f"{event.reply_id} (turn {event.turn}): {event.reason}")
        self._notice(event, "reply-refused", f"the agent's reply was not usable: {event.reason}", turn=event.turn)

    def _reply_cut(self, event: ReplyCutEvent) -> None:
        how = {
            "reply-deadline": f"the reply deadline passed ({event.seconds:g} s)" if event.seconds else "",
            "idle-deadline": f"the idle deadline passed ({event.seconds:g} s)" if event.seconds else "",
            "call-deadline": f"the call's deadline passed ({event.seconds:g} s)" if event.seconds else "",
            "broken": f"the stream broke off ({event.error})" if event.error else "the stream broke off",
            "token-limit": "the model reached its token limit",
        }[event.cause]
        self._moment("reply cut", f"turn {event.turn}: {how or event.cause}")

    def _reply_repeated(self, event: ReplyRepeatedEvent) -> None:
        self._moment("reply repeated", f"turn {event.turn}: the same unusable reply again; the call stopped")
        self._notice(event, "reply-repeated", "the agent repeated a reply that could not be used", turn=event.turn)

    def _turn_limit(self, event: TurnLimitEvent) -> None:
        self._moment("turn limit", f"{event.turns} turn(s) used")
        self._notice(event, "turn-limit", f"stopped after {event.turns} turns", turn=None)

    def _declare(self, event: DeclareEvent) -> None:
        noted = f"{event.context_key} = {_json_text(event.value)}"
        self._moment("declared", noted)
        self._aside(event, "declare", f"the agent notes {noted}")

    def _phatic(self, event: PhaticEvent) -> None:
        ends = event.signal == "session-complete"
        self._aside(event, "phatic", "the agent ends the conversation" if ends else "")

    def _delegate(self, event: DelegateEvent) -> None:
        intent = f" ({event.intent})" if event.intent else ""
        text = f": {_json_text(event.text)}" if event.text else ""
        self._moment("delegated", f"to {event.to}{intent}{text}")
        self._aside(event, "delegate", f"the agent hands over to {event.to}: {event.text or event.intent or ''}")

    def _execute(self, event: ExecuteEvent) -> None:
        self._aside(event, "execute", f"the agent sent {len(event.steps)} step(s) to execute; not run here")

    def _aside(self, event: Event, what: Any, text: str) -> None:
        self._add(Aside(what=what, text=text, data=_fields(event), seq=self._seq, time=self._time))

    def _ended_event(self, event: EndedEvent) -> None:
        self._moment("ended", event.reason)

    def _finished(self, event: FinishedEvent) -> None:
        self._moment("finished", f"{event.status} after {event.turns} turn(s)")


_HANDLERS: dict[type[Any], Callable[[Projection, Any], None]] = {
    SaidEvent: Projection._said,
    ResumedEvent: Projection._resumed,
    ReplyEvent: Projection._reply,
    ReplyStartedEvent: Projection._reply,
    InformEvent: Projection._inform,
    AskEvent: Projection._ask,
    AnsweredEvent: Projection._answered,
    ProposedEvent: Projection._proposed_event,
    SuggestionEvent: Projection._suggestion,
    DecidedEvent: Projection._decided_event,
    RefusedEvent: Projection._refused,
    DeferredEvent: Projection._deferred,
    ApprovalWaitingEvent: Projection._approval_waiting,
    ApprovalRefusedEvent: Projection._approval_refused,
    RemindedEvent: Projection._reminded,
    EscalatedEvent: Projection._escalated,
    ClaimedEvent: Projection._claimed,
    ReleasedEvent: Projection._released,
    AssignedEvent: Projection._assigned,
    ActionStartedEvent: Projection._action_started,
    FlowMovedEvent: Projection._flow_moved,
    OutcomeEvent: Projection._outcome,
    SentEvent: Projection._sent,
    InterruptedEvent: Projection._interrupted,
    NoReplyEvent: Projection._no_reply,
    SendFailedEvent: Projection._send_failed,
    ReplyRefusedEvent: Projection._reply_refused,
    ReplyCutEvent: Projection._reply_cut,
    ReplyRepeatedEvent: Projection._reply_repeated,
    UnconfirmedEvent: Projection._unconfirmed_event,
    TurnLimitEvent: Projection._turn_limit,
    DeclareEvent: Projection._declare,
    PhaticEvent: Projection._phatic,
    DelegateEvent: Projection._delegate,
    ExecuteEvent: Projection._execute,
    EndedEvent: Projection._ended_event,
    FinishedEvent: Projection._finished,
}


def approval_refused(before: Card | None, after: Card | None) -> str | None:
    """Why the approval policy refused the decision a call took on a card, in words, when it did (the card
    ``after`` the call says a refusal and holds no decision more than ``before`` it); else ``None``."""
    if after is None or not after.approval_refused:
        return None
    return after.approval_refused if len(after.decisions) == (len(before.decisions) if before else 0) else None


def project(records: Iterable[LogEntry | Event], *, shown: Iterable[str] = ()) -> Projection:
    """The projection of a log (entries or bare events), fed whole."""
    projection = Projection(shown)
    for record in records:
        projection.feed(record)
    return projection
