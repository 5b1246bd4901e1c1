"""The conversation core: every decision of a call, with no I/O, no awaiting and no callbacks.

A call (``say``, ``decide``, ``answer``, ``resume``) is a generator: it yields :mod:`effects
<dial_runtime.runtime.effects>` (send this message, put this suggestion to the person, run this action, wait for
more of the stream) and is sent back what they came to; an effect that raised is thrown into it. Every step is
an event recorded on the log and folded into :class:`~dial_runtime.runtime.state.ConversationState` at once, and
every lifecycle decision is a lookup in a machine's table. What a generator holds between two effects is only
where it stands in the reply, which the fold keeps too (its cursor and each suggestion's state): a process that
dies between two effects loses nothing that :meth:`ConversationCore.recover` cannot rebuild from the log.

The driver (:class:`~dial_runtime.driver.conversation.Conversation`) performs the effects under anyio; tests can
drive a call with a list of inputs and no event loop.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, Final, Literal

import msgspec

from ..errors import (
    ActionError,
    ClaimRefused,
    ConversationBusy,
    DialError,
    DialSizeError,
    Interruption,
    LinkRefused,
    LogError,
    NotWaiting,
    PayloadChanged,
    RecordedError,
    TokenLimitReached,
)
from ..language.claims import claims_done
from ..language.outcomes import (
    MAX_DEPTH,
    MAX_TEXT,
    STATUSES,
    Outcome,
    correction_reply,
    outcome_reply,
    refusal_reply,
    to_json_ready,
)
from ..language.parser import envelope_candidates, parse
from ..language.payloads import declare_value, pair_payload
from ..language.records import (
    Acknowledge,
    AskElement,
    Declare,
    Delegate,
    Element,
    Execute,
    Inform,
    Phatic,
    Suggest,
)
from ..language.stream import StreamParser, TextDelta
from ..statemachines import (
    CALL_STATUS,
    DECISION_REFUSALS,
    MOVES_FLOW,
    RUNNING,
    SUGGESTION,
    TURN_LOOP,
    OutcomeStatus,
    OutcomeTrigger,
)
from .effects import (
    AWAIT_STREAM,
    END_STREAM,
    GET_CONTEXT,
    AwaitPerson,
    CheckPrecondition,
    Consult,
    ConsultRules,
    DeadlinePassed,
    Effect,
    Expired,
    LookUp,
    NoReply,
    Ran,
    Reconcile,
    Replied,
    Review,
    Reviewed,
    RunAction,
    RunFailed,
    Send,
    Show,
    Streamed,
    Thinking,
    Unreconciled,
)
from .events import (
    ActionStartedEvent,
    AnsweredEvent,
    ApprovalRefusedEvent,
    ApprovalWaitingEvent,
    AskEvent,
    AssignedEvent,
    ClaimedEvent,
    CutCause,
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
    HandledEvent,
    InformAct,
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
    ReplyProgressEvent,
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
from .flow import FlowRules
from .log import EventLog
from .records import (
    Accept,
    ActionSpec,
    Ask,
    Defer,
    Dismiss,
    Edit,
    Issue,
    Say,
    TurnResult,
    as_decision,
    payload_digest,
)
from .state import (
    ADMITTED,
    ConversationState,
    OpenSuggestion,
    deciding_roles,
    fold_log,
    refusals,
)

#: The loop states in which a call goes on turning (neither ended nor parked for the person), and those that start
#: a turn: read from the table once.
TURNING = frozenset(
    state
    for state in TURN_LOOP.states
    if not TURN_LOOP.is_final(state) and "resume" not in TURN_LOOP.allowed(state)
)
STARTING = TURN_LOOP.sources("start_turn")
#: The loop states that take new words as they stand (in any other, the words supersede what waits): read once,
#: as TURNING is, for the check every call makes.
BEGINNING = TURN_LOOP.sources("begin")

#: Where :meth:`ConversationCore.context_span` finds the context in a composed message (a private-use character).
_SLOT = "\ue000"

#: The phatic signal with which an agent ends the conversation.
SESSION_COMPLETE = "session-complete"

#: The hint of an outcome whose action may or may not have taken effect.
UNKNOWN_EFFECT = "The turn stopped while the action ran; its effect is unknown."

#: Why a call that a dead process left open stopped.
PROCESS_STOPPED = "the process stopped"

#: The code of a dismissal of a suggestion the conversation had done already.
ALREADY_DONE = "already-done"

#: The code of a suggestion whose premise the domain found no longer holds, when the domain gives none.
PRECONDITION_FAILED = "precondition-failed"

#: The code of a suggestion one of the application's rules for whether to ask denied (its reason is the hint).
DENIED_BY_RULE = "denied-by-rule"


def already_done(suggestion_id: str) -> str:
    """The hint of a dismissal of a suggestion the conversation had done already (its ``done_before``)."""
    return (
        f"The person dismissed it because it was already done ({suggestion_id}, the same action and payload); "
        "do not propose it again unless they ask."
    )


#: Why what waited for the person ended when they said something new instead.
OVERTAKEN = "the person said something else"

#: How the log words a streamed reply cut short by a deadline (a replay reads from it which deadline passed).
CUT = "the reply was cut: "
REPLY_DEADLINE = "the reply deadline passed"
IDLE_DEADLINE = "the idle deadline passed"
CALL_DEADLINE = "the call's deadline passed"
BROKEN = "the stream broke off"
TOKEN_LIMIT = "the model reached its token limit (max_tokens)"
#: What the refusal of a reply that repeats the call's previous unusable one adds (the call stopped after it).
REPEATED = "; it is the same reply, byte for byte, as the one before it, so the call stopped: send another reply"
UNEXPECTED_ERROR = "unexpected-error"
"""The code of an action that failed by an exception not raised on purpose: its text stays out of the log."""

Call = Generator[Effect, Any, TurnResult]
"""A call in progress: yields effects, is sent their inputs, returns the call's result."""


def reason(error: BaseException) -> str:
    """Why a call stopped, in words the log keeps and a person reads: what stopped it, the library's own words
    for its errors (a recorded error's, an agent's endpoint refusing), and for any other exception (raised by a
    callback of the domain's, the agent's, the person's) its type alone, since its text may hold anything (a
    DSN, a path, a key): the driver gives that text to the ``dial_runtime`` logger only."""
    if isinstance(error, RecordedError):
        return str(error)
    if isinstance(error, DialError):
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if isinstance(error, Exception):
        return type(error).__name__
    if isinstance(error, KeyboardInterrupt):
        return "interrupted by the person (Ctrl-C)"
    if isinstance(error, SystemExit):
        return "the process exited"
    return "the call was cancelled"


def _not_kept(payload: Any, kept: Any) -> Issue | None:
    """Why a payload cannot be logged as it is (``kept`` is its JSON-ready form, which the log holds): it holds
    what JSON cannot (``NaN``, a lone surrogate, a tuple or a set, a key that is not a string, an object), or is
    over a size limit. ``None`` when ``kept`` is the payload itself, as it nearly always is: the payload validated
    is then the one logged, shown and run."""
    if type(kept) is type(payload) and kept == payload:
        return None
    try:
        why = _not_json(payload, 0)
    except RecursionError:
        why = None
    if why is not None:
        return Issue(code="invalid-payload", hint=f"The payload holds {why}; send plain JSON data.")
    return Issue(
        code="payload-too-large",
        hint=(
            f"The payload cannot be kept whole (a string over {MAX_TEXT:,} characters, more than {MAX_DEPTH} "
            "levels of nesting, or too much in all); send a smaller one."
        ),
    )


def _not_json(value: Any, depth: int) -> str | None:
    """What in ``value`` JSON data cannot hold as it is, in words; ``None`` when it is plain JSON data (then only
    a size limit can have changed it). Stops looking past :data:`MAX_DEPTH` levels."""
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"a number JSON cannot hold ({value!r})"
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "text that cannot be stored as UTF-8 (a lone surrogate such as \\ud800)"
        return None
    if depth > MAX_DEPTH:
        return None
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"a key that is not a string ({type(key).__name__})"
            why = _not_json(key, depth + 1) or _not_json(item, depth + 1)
            if why is not None:
                return why
        return None
    if kind is list:
        for item in value:
            why = _not_json(item, depth + 1)
            if why is not None:
                return why
        return None
    return f"a {kind.__name__}, which JSON has no form for"


def deadline_words(passed: DeadlinePassed) -> str:
    """How the log words a deadline that cut a streamed reply (after :data:`CUT`)."""
    if passed.deadline == "reply":
        return f"{REPLY_DEADLINE} ({passed.seconds:g} s since the message was sent)"
    if passed.deadline == "call":
        return f"{CALL_DEADLINE} ({passed.seconds:g} s of waiting for the agent in this call)"
    return f"{IDLE_DEADLINE} (no text for {passed.seconds:g} s)"


def several_envelopes(count: int) -> str:
    """Why a reply holding ``count`` envelopes with content is refused whole, in words the agent reads."""
    return (
        f"it holds {count} <dial> envelopes, so nothing in it was shown or run (an example of the format counts "
        "as one); send exactly one envelope"
    )


def cut_cause(failure: BaseException) -> CutCause:
    """Why a stream that had begun failed: ``token-limit`` when the agent raised :class:`TokenLimitReached` (as
    :class:`~dial_runtime.agents.ChatAgent` does for a ``finish_reason`` of ``length``), else ``broken``."""
    return "token-limit" if isinstance(failure, TokenLimitReached) else "broken"


def cut_words(cut: ReplyCutEvent) -> str:
    """How the log words a cut reply (after :data:`CUT`)."""
    if cut.cause == "token-limit":
        return TOKEN_LIMIT
    if cut.cause == "broken":
        return f"{BROKEN} ({cut.error})" if cut.error else BROKEN
    deadline = _CUT_DEADLINES[cut.cause]
    return deadline_words(DeadlinePassed(deadline=deadline, seconds=cut.seconds or 0.0))


#: The deadline that cut a reply, by the cause its ``reply-cut`` records, and the other way round.
_CUT_DEADLINES: dict[str, Literal["reply", "idle", "call"]] = {
    "reply-deadline": "reply",
    "idle-deadline": "idle",
    "call-deadline": "call",
}
_DEADLINE_CAUSES: dict[str, CutCause] = {
    "reply": "reply-deadline",
    "idle": "idle-deadline",
    "call": "call-deadline",
}


def no_reply_words(answer: NoReply) -> str:
    """How the log words a message the agent did not answer in time (``no-reply``), with why its tries failed
    meanwhile when the agent said (the connection refused, an HTTP status): not only that it was slow."""
    if answer.call:
        words = f"The agent didn't reply before {CALL_DEADLINE} ({answer.timeout:g} s of waiting for it)"
    else:
        words = f"The agent didn't reply within {answer.timeout:g}s"
    return words if answer.cause is None else f"{words}; it was retried, and failed: {answer.cause}"


def deliberate(error: BaseException) -> bool:
    """Whether ``run`` raised to fail on purpose, with words for the agent and the person: an
    :class:`ActionError`, or any exception that carries a ``code`` (as the reference reads one)."""
    return isinstance(error, ActionError) or getattr(error, "code", None) is not None


def _text_attribute(error: BaseException, name: str) -> str | None:
    value = getattr(error, name, None)
    return None if value is None else str(value)


class _Stream:
    """A streamed reply as it arrives: its parser, the elements complete so far, and how it went."""

    __slots__ = (
        "at",
        "cut",
        "elements",
        "ended",
        "failure",
        "handled_at",
        "held",
        "logged",
        "parser",
        "several",
        "started",
    )

    def __init__(self) -> None:
        self.parser = StreamParser()
        self.elements: list[Element] = []
        # Where the person reads now: the prose before the envelope (-1), the element the call waits for, or
        # nowhere (None: the call is busy with an earlier element); the text that arrived for later places waits.
        self.at: int | None = -1
        self.held: list[TextDelta] = []
        self.started = False
        self.ended = False
        self.failure: Exception | None = None
        self.cut: ReplyCutEvent | None = None  # why the reply stopped before its end
        self.several = 0  # the envelopes with content of a reply that holds more than one
        self.logged = 0  # how much of the reply's text ``reply-progress`` events hold
        self.handled_at: int | None = None  # how much had arrived when elements were last handled before the end


class ConversationCore:
    """One conversation's log, its fold, and the calls that advance it.

    ``max_turns`` bounds the turns of one call; ``decide_timeout`` each decision (seconds, ``None``: no bound);
    ``answers``: whether the person can answer asks at all (a human without ``answer()`` only sees them);
    ``flow``: the domain's flow (see :meth:`_flow_refusal` and :meth:`_move_flow`), ``None`` without one;
    ``conversation_id``, when given, names each message sent (:attr:`SentEvent.message_id`); ``clock`` gives
    the time of each event the log records (the driver's clock: the core reads none of its own).
    """

    __slots__ = (
        "_outcomes",
        "answers",
        "clock",
        "conversation_id",
        "decide_timeout",
        "flow",
        "log",
        "max_turns",
        "state",
        "stream",
        "stuck",
    )

    def __init__(
        self,
        entries: Iterable[LogEntry] = (),
        max_turns: int = 8,
        decide_timeout: float | None = None,
        answers: bool = True,
        flow: FlowRules | None = None,
        conversation_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conversation_id = conversation_id
        self.clock = clock
        self.flow = flow
        self.state = ConversationState(flow=None if flow is None else flow.table)
        self.log = EventLog(fold_log(entries, self.state)) if entries else EventLog()
        self.max_turns = max_turns
        self.decide_timeout = decide_timeout
        self.answers = answers
        self.stream: _Stream | None = None
        self._outcomes: list[Outcome] | None = None  # the outcomes of the call in progress
        self.stuck: LogError | None = None  # the stored entry that could not be folded in, if one could not

    # --- the log -----------------------------------------------------------------------------------------------

    def record(self, event: Event, at: float | None = None) -> None:
        """Fold an event into the state and append it to the log (the state refuses it first if it must), at the
        clock's time or ``at`` (a time the caller read to decide on it: a decision checked against a deadline).

        ``ConversationState.apply`` and ``EventLog.add`` are written out here: every event of every call passes
        here, and a Python call is worth about a dozen bytecodes (measured side by side: see CONTRIBUTING)."""
        state = self.state
        now = state.now = self.clock() if at is None else at
        try:
            handler = ADMITTED[state.life][type(event)]
        except KeyError:
            state.apply(event)  # refuses it, saying why
            raise
        handler(state, event)
        log = self.log
        log.events.append(event)
        log.times.append(now)

    def take_stored(self, entries: Iterable[LogEntry], stored: int) -> None:
        """Fold in what other workers stored after the first ``stored`` entries, all of them or none.

        Only the conversation's ending can have been recorded here and not stored between calls (``end()``):
        it is recorded again after the stored entries. Anything else unstored came from a call whose write
        failed, and is dropped: another worker's log is the truth. An entry that cannot stand raises its
        ``LogError`` and leaves the log and state as the first ``stored`` entries make them, with :attr:`stuck`
        naming the entry (the state is folded again from the log when the tail had been folded in part).
        """
        local = self.log.events[stored:]
        fresh = bool(local or stored < len(self.log) or not stored)
        if fresh:
            state = ConversationState(flow=self.state.flow)
            log = EventLog(fold_log(self.log.entries(0, stored), state))
        else:
            state, log = self.state, self.log
        try:
            checked = fold_log(entries, state, first_seq=stored + 1)
        except LogError as error:
            self.stuck = error
            if not fresh:  # the tail was folded into the live state in part: fold the log it had again
                self.state = ConversationState(flow=self.state.flow)
                fold_log(self.log.entries(), self.state)
            raise
        for entry in checked:
            log.add_entry(entry)
        self.state, self.log, self.stuck = state, log, None
        if any(isinstance(event, EndedEvent) for event in local):
            self.end("end() was called")

    def end(self, why: str) -> None:
        """End the conversation (idempotent)."""
        self.record(EndedEvent(reason=why))

    def recover(self) -> Generator[Effect, Any, None]:
        """Close a call that a dead process left open (a generator of effects, driven like a call): the domain is
        asked what became of each action that had started and has no result (:class:`Reconcile`); one it can
        tell of ends as it happened, ``done`` or ``failed``, its outcome marked ``reconciled``, and any other ends
        ``failed`` (``interrupted``: it is never run again). A reply being handled then waits as if its decisions
        and answers were deferred, to be resumed; a call that stopped before that is interrupted."""
        state = self.state
        if not state.in_call:
            return
        for opened in list(state.open_suggestions.values()):
            if opened.state in RUNNING:
                key = opened.key or self._run_key(opened.id)
                found = yield Reconcile(
                    action=opened.action, payload=opened.payload, key=key, suggestion_id=opened.id
                )
                if isinstance(found, Unreconciled):
                    self._interrupt(opened, PROCESS_STOPPED)
                else:
                    self._ran(opened, found, reconciled=True)
        if TURN_LOOP.is_final(state.loop):
            self.record(FinishedEvent(status=CALL_STATUS[state.loop], turns=state.turn))
            return
        if "handled" in TURN_LOOP.allowed(state.loop):
            for opened in state.open_suggestions.values():
                if opened.deciding and not opened.deferred:
                    self.record(DeferredEvent(subject_id=opened.id, kind="suggestion"))
            for ask_id in list(state.asked):
                self.record(DeferredEvent(subject_id=ask_id, kind="ask"))
            self.record(HandledEvent(turn=state.turn, complete=False))
            self.record(FinishedEvent(status="awaiting", turns=state.turn))
            return
        self.record(InterruptedEvent(turn=state.turn, reason=PROCESS_STOPPED))
        self.record(FinishedEvent(status="interrupted", turns=state.turn))

    def settle(self) -> Generator[Effect, Any, TurnResult | None] | None:
        """What is owed before the next call, as one call: close what a dead process left open
        (:meth:`recover`), then fire what is due of the deferred suggestions' times (:meth:`expire_due`, whose
        result it returns); ``None`` when there is neither, the usual case, which then costs the driver one
        question."""
        if self.state.in_call:
            return self._settling()
        return self.expire_due()

    def _settling(self) -> Generator[Effect, Any, TurnResult | None]:
        yield from self.recover()
        expiring = self.expire_due()
        return None if expiring is None else (yield from expiring)

    # --- the calls ---------------------------------------------------------------------------------------------

    def say(self, words: str, by: str | None = None, roles: Iterable[str] = ()) -> Call:
        """Send the person's words (``by`` who spoke, holding ``roles``, when known) with whatever is owed, and
        run turns until the agent needs nothing back. Words said over suggestions waiting for the person
        supersede them, unless the approval policy of one of them does not admit the speaker: then nothing is
        said, and the log keeps why (``approval-refused`` for each such suggestion)."""
        state = self.state
        if state.loop not in BEGINNING:  # new words supersede what waits for the person
            overtaken = state.superseded()
            held = deciding_roles(overtaken, roles)
            now = self.clock()
            refused = refusals(overtaken, "supersede", by, held, now)
            if refused:
                self.record(ResumedEvent(call="decide"), now)
                return self._drive("", self._refusing(refused, by, held, now, "say"))
            self.record(ResumedEvent(call="say", by=by, roles=held))
            self._abandon(OVERTAKEN)
            self.record(InterruptedEvent(turn=state.turn, reason=OVERTAKEN))
            self.record(FinishedEvent(status="interrupted", turns=state.turn))
        self.record(SaidEvent(text=words, by=by))
        if state.loop in TURN_LOOP.finals:  # nothing to send, or the conversation has ended
            return self._finished_at_once()
        return self._drive(words, None)

    def decide(
        self,
        suggestion_id: str,
        decision: Accept | Dismiss | Edit | Say | Defer,
        by: str | None,
        shown: str | None = None,
        via: str | None = None,
        roles: tuple[str, ...] = (),
        link: str | None = None,
    ) -> Call:
        """Take the person's deferred decision on a suggestion and carry on. Nothing changes when it is not
        awaiting one: :class:`AlreadyDecided` when it has ended, ``DialError`` otherwise; nor when ``shown`` (the
        digest of the payload the person saw) is not the waiting payload's: :class:`PayloadChanged`; nor when
        ``link`` (the id of the single-use link the decision comes through) decided it already:
        :class:`LinkRefused` (``replayed``)."""
        opened = self.state.open_suggestions.get(suggestion_id)
        if opened is None or not opened.deferred:
            raise NotWaiting(suggestion_id, "suggestion", "a decision")
        if shown is not None and shown != (waiting := payload_digest(opened.action, opened.payload)):
            raise PayloadChanged(suggestion_id, shown=shown, waiting=waiting)
        if opened.decided_through(link):
            raise LinkRefused("replayed", "the link has been used already")
        self.record(ResumedEvent(call="decide"))
        return self._drive("", self._decided(opened, decision, by, via, roles, link))

    def answer(self, ask_id: str, text: str, by: str | None) -> Call:
        """Take the person's deferred answer to an ask and carry on (an empty answer: the question stands)."""
        if ask_id not in self.state.open_asks:
            raise NotWaiting(ask_id, "ask", "an answer")
        self.record(ResumedEvent(call="answer"))
        self.record(AnsweredEvent(ask_id=ask_id, text=text, by=by))
        return self._drive("", None)

    # --- who holds a waiting card (between calls; none of these is a call on the agent) --------------------------

    def claim(self, suggestion_id: str, by: str | None, roles: Iterable[str], until: float) -> None:
        """Record ``by``'s claim (holding ``roles``) on a suggestion waiting for a deferred decision, until
        ``until``: :class:`NotWaiting` when it does not wait, :class:`ClaimRefused` when its rules refuse it, and
        nothing changes."""
        opened, now = self._card_to_hold(suggestion_id), self.clock()
        if not (math.isfinite(until) and until > now):
            raise ValueError(f"a claim ends after it is made, not at {until!r}")
        held = tuple(sorted(roles))
        self._refuse_holding(opened, "claim", by, held, now)
        assert by is not None  # the rules refuse a claim by nobody
        self.record(ClaimedEvent(suggestion_id=suggestion_id, by=by, until=until, roles=held), now)

    def release(self, suggestion_id: str, by: str | None) -> None:
        """Record the release of ``by``'s claim on a waiting suggestion (refused as :meth:`claim` is)."""
        opened, now = self._card_to_hold(suggestion_id), self.clock()
        self._refuse_holding(opened, "release", by, (), now)
        assert by is not None  # nobody holds no claim
        self.record(ReleasedEvent(suggestion_id=suggestion_id, by=by), now)

    def assign(
        self,
        suggestion_id: str,
        by: str | None,
        roles: Iterable[str],
        *,
        person: str | None = None,
        person_roles: Iterable[str] = (),
        role: str | None = None,
    ) -> None:
        """Record ``by``'s assignment (holding ``roles``) of a waiting suggestion to ``person`` (holding
        ``person_roles``) or to ``role``, or to nobody (refused as :meth:`claim` is; ``ValueError`` for both a
        person and a role)."""
        if person is not None and role is not None:
            raise ValueError("assign a card to a person or to a role, not both")
        opened, now = self._card_to_hold(suggestion_id), self.clock()
        held, theirs = tuple(sorted(roles)), tuple(sorted(person_roles)) if person is not None else ()
        self._refuse_holding(opened, "assign", by, held, now, person=person, person_roles=theirs, role=role)
        assert by is not None  # the rules refuse an assignment by nobody
        self.record(
            AssignedEvent(
                suggestion_id=suggestion_id, by=by, roles=held, person=person, person_roles=theirs, role=role
            ),
            now,
        )

    def _card_to_hold(self, suggestion_id: str) -> OpenSuggestion:
        """The suggestion waiting for a deferred decision, between calls."""
        if self.state.in_call:
            raise ConversationBusy("a call is driving this conversation: claim its cards once it is done")
        opened = self.state.open_suggestions.get(suggestion_id)
        if opened is None or not opened.deferred:
            raise NotWaiting(suggestion_id, "suggestion", "a decision")
        return opened

    @staticmethod
    def _refuse_holding(
        opened: OpenSuggestion, kind: str, by: str | None, roles: tuple[str, ...], now: float, **assignee: Any
    ) -> None:
        refusal = opened.holding_refusal(kind, by, roles, now, **assignee)
        if refusal is not None:
            holder = opened.holder(now)
            raise ClaimRefused(
                opened.id,
                *refusal,
                holder=holder,
                until=opened.claimed_until if holder is not None else None,
            )

    def expire_due(self) -> Generator[Effect, Any, TurnResult | None] | None:
        """Fire what is due of the deferred suggestions' times: end one whose premise the domain no longer finds
        holding, checked again once its ``recheck_every`` came (``invalid``), remind the deciders of one whose
        reminder time came (``reminded``), escalate one whose escalation time came (``escalated``), and end one
        whose deadline passed (``dismissed``, ``expired``); then carry on as a decision would (the agent is told
        with the next message, or at once when a turn follows anyway, as it does for an ``invalid`` one).
        ``None`` when nothing is due. Whichever comes first, the deadline or a decision, ends the suggestion,
        once. The premises are checked before anything is recorded: one that holds leaves no trace, and the call
        then returns ``None`` when nothing else was due."""
        state = self.state
        if not state.open_suggestions or "resume" not in TURN_LOOP.allowed(state.loop):
            return None
        now = self.clock()
        due = [opened for opened in state.open_suggestions.values() if opened.due(now)]
        checking = [
            opened
            for opened in state.open_suggestions.values()
            if opened.check_due(now) and not opened.expired_at(now)
        ]
        if checking:
            return self._checking(due, checking, now)
        if not due:
            return None
        self.record(ResumedEvent(call="expire"))
        return self._drive("", self._firing(due, (), now))

    def _checking(
        self, due: Sequence[OpenSuggestion], checking: Sequence[OpenSuggestion], now: float
    ) -> Generator[Effect, Any, TurnResult | None]:
        """Check the premises of ``checking``, then fire what lapsed and what is ``due``, if anything."""
        lapsed = []
        for opened in checking:
            issue = yield self._check(opened)
            if issue is not None:
                lapsed.append((opened, issue))
        if not due and not lapsed:
            return None
        self.record(ResumedEvent(call="expire"))
        return (yield from self._drive("", self._firing(due, lapsed, now)))

    def _firing(
        self, due: Sequence[OpenSuggestion], lapsed: Sequence[tuple[OpenSuggestion, Issue]], now: float
    ) -> Generator[Effect, Any, None]:
        for opened, issue in lapsed:  # first: the replay finds a check's answer right after the call began
            self._lapse(opened, issue)
        for opened in due:
            if opened.id not in self.state.open_suggestions:  # it lapsed
                continue
            if opened.expired_at(now):
                self._expire(opened)
                continue
            if opened.reminder_due(now):
                self.record(RemindedEvent(suggestion_id=opened.id), now)
            if opened.escalation_due(now):
                self.record(EscalatedEvent(suggestion_id=opened.id, to=opened.escalate_to), now)
        return
        yield  # makes this a generator that yields nothing

    def deadlines(self) -> list[tuple[str, float]]:
        """The times the deferred suggestions have coming (a reminder, an escalation, a deadline, the next check
        of a premise), each suggestion's soonest, soonest first: when :meth:`expire_due` has something to do."""
        now = self.clock()
        soonest = []
        for opened in self.state.open_suggestions.values():
            when = opened.soonest(now)
            if when is not None:
                soonest.append((opened.id, when))
        return sorted(soonest, key=lambda pair: pair[1])

    def resume(self) -> Call | None:
        """Carry on with a reply whose handling a crash cut short; ``None`` when nothing waits to be resumed."""
        if "resume" not in TURN_LOOP.allowed(self.state.loop):
            return None
        self.record(ResumedEvent(call="resume"))
        return self._drive("", None)

    def _finished_at_once(self) -> Call:
        state = self.state
        status = CALL_STATUS[state.loop]
        self.record(FinishedEvent(status=status, turns=0))
        return TurnResult(status=status, turns=0)
        yield  # makes this a generator that yields nothing

    def _drive(self, words: str, first: Generator[Effect, Any, None] | None) -> Call:
        """Run the turn loop (after ``first``, a step that must happen first) until this call is done: each turn
        sends a message with what is owed and the words, and handles the reply.

        The loop is written out here rather than in a generator of its own: every effect of a call passes up
        through each generator that delegates to it, so the steps that need no effect of their own are plain
        methods (:meth:`_message`)."""
        self._outcomes = []
        state = self.state
        try:
            if first is not None:
                yield from first
            while state.loop in TURNING:
                if state.loop in STARTING:
                    if state.turn >= self.max_turns:  # the limit goes on the log: the fold ends the loop with it
                        self.record(TurnLimitEvent(turns=self.max_turns))
                        break
                    send = self._message(words, (yield GET_CONTEXT))
                    words = ""
                    try:
                        answer = yield send
                    except Exception as error:
                        self.record(SendFailedEvent(turn=send.turn, error=reason(error)))
                        raise
                    if isinstance(answer, NoReply):
                        self.stream = None
                        self.record(
                            NoReplyEvent(
                                turn=send.turn,
                                error=no_reply_words(answer),
                                cause=answer.cause,
                                seconds=answer.timeout,
                                call=answer.call,
                            )
                        )
                        break
                    if isinstance(answer, Streamed):
                        yield from self._streamed(send.turn, answer)
                        self.record(HandledEvent(turn=state.turn))
                        continue
                    assert isinstance(answer, Replied)
                    self.record(ReplyEvent(turn=send.turn, text=answer.text, provider=answer.provider))
                elements = self._elements()
                yield from self._handle(elements, self._unhandled(), len(elements))
                self.record(HandledEvent(turn=state.turn))
        except GeneratorExit:  # closed unfinished: its driver is gone, as a dead process's is (recover closes it)
            raise
        except BaseException as error:
            why = error.why if isinstance(error, Interruption) else reason(error)
            self._log_progress()  # what arrived of a stream it cut off: the words the turn was read from
            if state.loop not in TURN_LOOP.finals:
                self._abandon(why)
                self.record(InterruptedEvent(turn=state.turn, reason=why))
            self.stream = None
            self.record(FinishedEvent(status="interrupted", turns=state.turn))
            raise
        finally:
            outcomes, self._outcomes = self._outcomes or [], None
        status = CALL_STATUS[state.loop]
        self.record(FinishedEvent(status=status, turns=state.turn))
        return TurnResult(status=status, turns=state.turn, outcomes=tuple(outcomes), pending=state.pending())

    def _message(self, words: str, context: object) -> Send:
        """The next turn's message, on the log as sent (see :meth:`_compose`)."""
        turn = self.state.turn + 1
        message, span = self._compose(words, context)
        # The message's id (none without a conversation id): the conversation's and the number of the reply it
        # asks for, so a message sent again because no reply to it reached the log (a crash, a deadline, a failed
        # send) has the id of the first copy.
        named = self.conversation_id
        message_id = None if named is None else f"{named}/reply-{self.state.replies + 1}"
        self.record(SentEvent(turn=turn, message=message, message_id=message_id, context=span))
        return Send(message=message, turn=turn, message_id=message_id)

    def _compose(self, words: str, context: object) -> tuple[str, tuple[int, int] | None]:
        """The message of a turn: outcomes and refusals owed, the domain's context, then the words; and where the
        context stands in it (``None``: the domain gave none)."""
        state = self.state
        parts = []
        if state.owed_outcomes:
            parts.append(outcome_reply(state.owed_outcomes))
        for refusal in state.owed_refusals:
            parts.append(refusal_reply(refusal.reply_id, refusal.reason))
        for correction in state.owed_corrections:
            parts.append(correction_reply(f"reply-{state.replies}", correction))
        span = None
        if context:
            text = str(context)
            start = len("\n\n".join(parts)) + 2 if parts else 0  # the parts before it, and a blank line
            span = (start, start + len(text))
            parts.append(text)
        if self.flow is not None:
            parts.append(self.flow.context(self._flow_state()))
        spoken = (*state.owed_words, words) if words else state.owed_words
        if spoken:
            parts.append("\n\n".join(spoken))
        return "\n\n".join(parts), span

    def context_span(self, message: str, words: str) -> tuple[int, int] | None:
        """Where the domain's context stands in ``message``, composed by this core for the next turn with
        ``words`` (how a log written before ``sent`` events held it is read: :mod:`.upgrade`); ``None`` when it
        holds none, or is not a message this core composes now."""
        if message == self._compose(words, None)[0]:
            return None
        before, _, after = self._compose(words, _SLOT)[0].partition(_SLOT)
        if len(message) > len(before) + len(after) and message.startswith(before) and message.endswith(after):
            return (len(before), len(message) - len(after))
        return None

    # --- a streamed reply --------------------------------------------------------------------------------------

    def _streamed(self, turn: int, first: Streamed) -> Generator[Effect, Any, None]:
        """Handle a streamed reply: its chunks arrive as the inputs of :class:`Streamed` (``first``, then each
        :data:`AWAIT_STREAM`'s); its elements are handled as they complete, then what only the whole reply shows.

        An inform or acknowledge is handled as it completes; anything else (a suggestion, an ask, a fact) waits
        for the reply's end, since a later envelope would make the whole reply ambiguous (see
        :func:`several_envelopes`). Past the reply's or its envelope's size limit the core reads no more: the reply
        is unusable, as a whole one would be. A reply that stopped before its end (a deadline, a stream that broke
        off, the model's token limit: ``reply-cut``) is handled as far as it got: the elements complete by then
        as usual, never one still open; the agent is told with the next message, which follows at once.
        """
        stream = self.stream = _Stream()
        yield from self._take(stream, first)
        if stream.started:
            yield from self._consume(stream)
        yield END_STREAM
        if stream.failure is not None and not stream.started:
            self.stream = None
            self.record(SendFailedEvent(turn=turn, error=reason(stream.failure)))
            raise stream.failure
        if stream.several:
            self.stream = None
            self._refuse(several_envelopes(stream.several))
            return
        if stream.cut is not None:
            self.stream = None
            self._cut(stream)
            return
        elements = self._elements()
        self.stream = None
        yield from self._handle(elements, self._unhandled(), len(elements))

    def _take(self, stream: _Stream, streamed: Streamed) -> Generator[Effect, Any, None]:
        """Take what arrived of the stream: feed its chunks to the parser (the first records ``reply-started``),
        pass the text the person may read now on to them (:class:`Show`), and, once the stream has ended or
        passed a size limit, put the reply on the log."""
        parser = stream.parser
        for chunk in streamed.chunks:
            if stream.ended or parser.overflow is not None:
                break
            if not stream.started:
                stream.started = True
                self.record(ReplyStartedEvent(turn=self.state.turn))
            try:
                completed = parser.feed(chunk)
            except DialSizeError:
                break
            if completed:
                stream.elements.extend(completed)
        yield from self._show(stream)  # before the reply's end is recorded: the text came first
        if not stream.ended and (streamed.ended or parser.overflow is not None):
            self._end_stream(stream, streamed)

    def _show(self, stream: _Stream) -> Generator[Effect, Any, None]:
        """Show the person the text that arrived where they read now (``stream.at``), keep what belongs further
        on, and drop what belongs to an element already shown whole (its ``inform`` says it)."""
        held = stream.held
        held.extend(stream.parser.text_deltas())
        at = stream.at
        if not held or at is None:
            return
        kept, shown = [], []
        for delta in held:
            element = delta.element
            if delta.replaces:  # the early reading went wrong: the complete inform will say it right
                continue
            if element == at or (element == -2 and at >= len(stream.elements)):
                shown.append(InformDeltaEvent(text=delta.text, act=delta.act, element=element))
            elif element > at or element == -2:
                kept.append(delta)
        stream.held = kept
        if shown:
            yield Show(notices=tuple(shown))

    def _end_stream(self, stream: _Stream, streamed: Streamed) -> None:
        """The streamed reply ended (or passed a size limit): why, and the reply on the log unless it failed
        before its first chunk."""
        stream.ended = True
        passed, failure = streamed.passed, streamed.failure
        turn = self.state.turn
        if passed is not None:
            stream.cut = ReplyCutEvent(turn=turn, cause=_DEADLINE_CAUSES[passed.deadline], seconds=passed.seconds)
        if failure is not None:
            stream.failure = failure
            if not stream.started:
                return
            cause: CutCause = cut_cause(failure)
            error = reason(failure) if cause == "broken" else None
            stream.cut = ReplyCutEvent(turn=turn, cause=cause, error=error)
        elif not stream.started:
            stream.started = True
            self.record(ReplyStartedEvent(turn=turn))
        self.record(
            ReplyEvent(
                turn=turn, text=stream.parser.text, handled_at=stream.handled_at, provider=streamed.provider
            )
        )
        if stream.cut is not None:
            self.record(stream.cut)

    def _cut(self, stream: _Stream) -> None:
        """What a cut reply comes to once its complete elements are handled: its prose so far shown when no
        envelope began (the person saw it arrive), and the agent told why the rest was not read."""
        parser = stream.parser
        cut = stream.cut
        assert cut is not None
        if not parser.started:
            prose = parser.text.strip()
            if prose:
                self._prose(prose, -1)
        advice = "; send a shorter reply" if cut.cause == "token-limit" else ""
        self._refuse(
            f"{CUT}{cut_words(cut)}; the elements complete by then were handled, the rest was not read{advice}"
        )

    def _consume(self, stream: _Stream) -> Generator[Effect, Any, None]:
        """Handle streamed elements in order; a suggest without its own payload waits for what follows it."""
        index = self._unhandled()
        prose_shown = False
        parser = stream.parser
        while True:
            if not prose_shown and parser.started:
                prose_shown = True
                stream.at = None
                if parser.prose_before and parser.prose_before.strip():
                    self._prose(parser.prose_before.strip(), -1)
            arrived = stream.elements
            ready = len(arrived)
            if not stream.ended:  # only text is handled before the end: a later envelope would void the rest
                ready = index
                while ready < len(arrived) and isinstance(arrived[ready], (Inform, Acknowledge)):
                    ready += 1
            elif not stream.several and (several := envelope_candidates(parser.text)) > 1:
                stream.several = several
                break
            if index < ready:
                if not stream.ended:
                    stream.handled_at = len(parser.text)
                index = yield from self._handle(arrived, index, ready)
                continue
            if stream.ended:
                break
            stream.at = index if prose_shown else -1
            yield from self._show(stream)
            streamed = yield AWAIT_STREAM
            yield from self._take(stream, streamed)  # the text for the element waited on is shown as it comes
            stream.at = None
        stream.at, stream.held = None, []
        if stream.several:  # the prose after the envelope holds another one: nothing of it is shown
            return
        trailing = parser.prose_after()
        if prose_shown and trailing:
            self._prose(trailing, -2)

    # --- a whole reply -----------------------------------------------------------------------------------------

    def _elements(self) -> tuple[Element, ...]:
        """The current reply's elements, or none after recording why it cannot be used or has no envelope."""
        state = self.state
        reply = state.reply or ""
        overflow = self.stream.parser.overflow if self.stream is not None else None
        if overflow is not None:
            return self._refuse(f"{overflow}; the rest was not read")
        try:
            envelope = parse(reply, schema=False)
        except DialSizeError as error:
            return self._refuse(str(error))
        if envelope is None:
            text = reply.strip()
            if text and state.cursor < -1:
                self._prose(text, -1)
            return ()
        if envelope.candidates > 1:
            return self._refuse(several_envelopes(envelope.candidates))
        if not envelope.elements:
            checked = parse(reply)  # with the schema's findings, which may be all there is to say about it
            if checked is not None and checked.issues:
                return self._refuse("; ".join(issue.message for issue in checked.issues))
        # Elements, and none says anything: the agent must be told. Such an envelope has an issue that says so
        # (``empty-envelope``), so one without issues is usable, as nearly every reply is.
        elif envelope.issues and not envelope.usable:
            return self._refuse("; ".join(issue.message for issue in envelope.issues) or "the envelope is empty")
        if state.cursor < -1 and envelope.prose:
            self._prose(envelope.prose, -1)
        return envelope.elements

    def _refuse(self, why: str) -> tuple[Element, ...]:
        """Record why the reply cannot be used (once a reply); a reply that repeats the call's previous one,
        which could not be used either, stops the call (``reply-repeated``), its refusal owed to the next."""
        state = self.state
        if not state.owed_refusals:
            repeated = state.repeats_unusable()
            words = f"{why}{REPEATED}" if repeated else why
            reply_id = f"reply-{state.replies}"
            self.record(ReplyRefusedEvent(turn=state.turn, reply_id=reply_id, reason=words, element=-1))
            if repeated:
                self.record(ReplyRepeatedEvent(turn=state.turn))
        return ()

    def _handle(self, elements: Sequence[Element], index: int, stop: int) -> Generator[Effect, Any, int]:
        """Handle the elements from ``index`` to ``stop`` in document order; the index of the next one (a
        suggest may use the elements after it for its payload)."""
        while index < stop:
            element = elements[index]
            if isinstance(element, Suggest):
                index = yield from self._suggest(elements, index)
                continue
            if isinstance(element, AskElement):
                yield from self._ask(element, index)
            else:
                _HANDLERS[element.type](self, element, index)
            index += 1
        return index

    def _unhandled(self) -> int:
        """The index of the reply's first element not yet accounted for (a resumed call carries on there)."""
        return max(self.state.cursor + 1, 0)

    def _inform(self, element: Any, index: int) -> None:
        """Show an inform or acknowledge; marked unconfirmed first when it contradicts the log: an acknowledgement
        of what the log does not hold (:meth:`_contradiction`), or words that say something was done in a call
        where nothing has run (:func:`~dial_runtime.language.claims.claims_done`)."""
        text = element.text
        if text:
            act: InformAct = "inform"
            if isinstance(element, Acknowledge):
                act = "acknowledge"
                contradiction = self._contradiction(element)
            else:
                contradiction = self._unran_claim(text)
            if contradiction is not None:
                self.record(UnconfirmedEvent(reason=contradiction, element=index))
            self.record(InformEvent(text=text, act=act, element=index))

    def _prose(self, text: str, element: int) -> None:
        """Show the reply's prose before (``element`` -1) or after (-2) its envelope, or all of a reply without
        one; marked unconfirmed first when it says something was done and nothing has run in the call."""
        claim = self._unran_claim(text)
        if claim is not None:
            self.record(UnconfirmedEvent(reason=claim, element=element))
        self.record(InformEvent(text=text, element=element))

    def _unran_claim(self, text: str) -> str | None:
        """Why ``text`` is not confirmed: it says something was done in a call where nothing has run yet; ``None``
        when it says no such thing, or an action ran."""
        if self._ran_in_call() or not claims_done(text):
            return None
        return UNRAN_CLAIM

    def _ran_in_call(self) -> bool:
        """Whether an action ran to ``done`` in the call in progress."""
        outcomes = self._outcomes
        if not outcomes:  # the usual case: no generator made
            return False
        return any(outcome.status == "done" for outcome in outcomes)

    def _contradiction(self, element: Acknowledge) -> str | None:
        """How an acknowledgement contradicts the log: it names (``of``) an id no suggestion, ask or reply of the
        conversation had, or claims (``yield="sg-3:done"``) an outcome other than the one recorded; ``None``
        when it does not."""
        state = self.state
        of = element.of
        if of and not (state.used(of) or _reply_number(of) in range(1, state.replies + 1)):
            return f"this conversation has no {of!r}"
        for claim in element.yields:
            subject, _, status = claim.rpartition(":")
            if not subject or status not in STATUSES:
                continue
            recorded = state.ended_suggestions.get(subject)
            if recorded == status:
                continue
            if recorded is not None:
                return f"{subject} ended {recorded}, not {status}"
            if subject in state.open_suggestions:
                return f"{subject} has no outcome yet"
            return f"this conversation has no suggestion {subject!r}"
        return None

    def _declare(self, element: Declare, index: int) -> None:
        if element.context_key is not None:
            self.record(DeclareEvent(context_key=element.context_key, value=declare_value(element), element=index))

    def _phatic(self, element: Phatic, index: int) -> None:
        if element.signal:
            self.record(PhaticEvent(signal=element.signal, element=index))
            if element.signal == SESSION_COMPLETE and not self.state.ended:
                self.end(f"the agent signalled {SESSION_COMPLETE}")

    def _delegate(self, element: Delegate, index: int) -> None:
        self.record(
            DelegateEvent(
                to=element.to or "",
                intent=element.intent,
                text=element.text,
                payload=element.payload,
                element=index,
            )
        )

    def _execute(self, element: Execute, index: int) -> None:
        self.record(ExecuteEvent(id=element.id, steps=element.steps, element=index))

    def _ask(self, element: AskElement, index: int) -> Generator[Effect, Any, None]:
        state = self.state
        asked = state.instead is None and self.answers
        ident = element.id if element.id and not state.used(element.id) else state.next_id("ask")
        ask = Ask(
            id=ident,
            text=element.text or "",
            response_type=element.response_type,
            options=element.options,
            timeout=element.timeout,
        )
        self.record(AskEvent(**msgspec.structs.asdict(ask), asked=asked, element=index))  # the ask, as logged
        if not asked:
            return
        given = yield Consult(question=ask)
        if isinstance(given, Thinking):
            given = yield self._await_person(ask.timeout)
        if isinstance(given, Expired):
            self.record(AnsweredEvent(ask_id=ask.id, text="", expired=True))
            return
        if isinstance(given.value, Defer):
            self.record(DeferredEvent(subject_id=ask.id, kind="ask"))
            return
        text = "" if given.value is None else str(given.value)
        self.record(AnsweredEvent(ask_id=ask.id, text=text, by=given.by))

    # --- a suggestion's lifecycle ------------------------------------------------------------------------------

    def _propose(self, element: Suggest, payload: Any, last: int) -> OpenSuggestion:
        """Record a suggestion read from the reply (``last``: the last element it used) and return it open.

        An id the agent gave that this conversation used already is not taken over: the suggestion gets the
        next assigned id, and its review ends it ``invalid`` (``duplicate-id``).
        """
        state = self.state
        given = element.id
        ident = given if given and not state.used(given) else state.next_id("sg")
        numbered = ident != given
        self.record(
            ProposedEvent(
                id=ident,
                # One string per action name however many conversations propose it: a parsed name is a new one.
                action=sys.intern(element.action or ""),
                payload=payload,
                numbered=numbered,
                text=element.text or "",
                element=last,
            )
        )
        return state.open_suggestions[ident]

    def _suggest(self, elements: Sequence[Element], index: int) -> Generator[Effect, Any, int]:
        """Run one suggestion's lifecycle to its outcome (or to a deferral); return the next element's index."""
        element = elements[index]
        assert isinstance(element, Suggest)
        payload, problem, after = pair_payload(elements, index)
        opened = self._propose(element, to_json_ready(payload), after - 1)
        unkept = None if problem is not None else _not_kept(payload, opened.payload)
        spec: ActionSpec | None = yield LookUp(action=opened.action, suggestion_id=opened.id)
        issue: Issue | None = None
        preview = ""
        if element.id and opened.id != element.id:
            issue = Issue(
                code="duplicate-id",
                field="id",
                hint=f"The id '{element.id}' is used already in this conversation; give each suggestion its own.",
            )
        elif spec is None:
            issue = Issue(code="unknown-action", hint=f"There is no action '{opened.action}'.")
        elif self.flow is not None and (refusal := self._flow_refusal(opened.action)) is not None:
            issue = refusal
        elif problem is not None:
            issue = Issue(code="invalid-payload", hint=problem)
        elif unkept is not None:
            issue = unkept
        else:
            reviewed: Reviewed = yield Review(
                action=opened.action, payload=opened.payload, suggestion_id=opened.id
            )
            issue, preview = reviewed.issue, reviewed.preview
            if issue is None and spec.precondition:  # a premise that fails already: never shown
                issue = yield self._check(opened)
        if issue is not None:
            self._finish(opened, "reject", code=issue.code, field=issue.field, hint=issue.hint)
            return after
        assert spec is not None
        if self.state.instead is not None:  # the person said something else in this reply: never shown
            self._finish(opened, "overtake", preview=preview)
            return after
        done_before = None
        state = self.state
        if spec.mutates and not spec.handoff and not spec.repeatable:
            done_before = state.last_done(opened.action, opened.payload)
        now = self.clock()
        waits = spec.mutates and not spec.handoff
        policy = spec.policy if waits else None
        ruled = None
        if waits:
            ruled = yield ConsultRules(
                suggestion_id=opened.id,
                action=opened.action,
                payload=opened.payload,
                preview=preview,
                principal=state.speaker,
                facts=state.facts,
            )
        shown = SuggestionEvent(
            id=opened.id,
            action=opened.action,
            text=element.text or "",
            payload=opened.payload,
            preview=preview,
            destructive=spec.destructive,
            mutates=spec.mutates,
            handoff=spec.handoff,
            done_before=done_before,
            policy=policy,
            asked_by=state.speaker if policy is not None and policy.separation else None,
        )
        if ruled is not None:  # apart, as _timed's times are: most suggestions are ruled on by no rule
            shown = msgspec.structs.replace(shown, ruled=ruled)
        if waits and spec.precondition:
            shown = msgspec.structs.replace(shown, precondition=True, recheck_every=spec.recheck_every)
        if waits and (ruled is None or state.shown_waits(shown)):
            seconds = spec.deadline if spec.deadline is not None else self.decide_timeout
            if seconds is not None or spec.remind_after is not None or spec.escalate_after is not None:
                shown = _timed(shown, now, seconds, spec)
        self.record(shown, now)
        if opened.deciding:
            yield from self._decide(opened)
        elif SUGGESTION.is_final(opened.state):  # a rule denied it
            assert ruled is not None
            self._finish(opened, None, code=DENIED_BY_RULE, hint=ruled.reason)
        else:
            self._ran(opened, (yield self._start(opened, preview)))
        return after

    def _await_person(self, deadline: float | None) -> AwaitPerson:
        """The wait for an answer the person's function has to give later (a :class:`Consult` came to
        :class:`Thinking`), for at most ``deadline`` seconds.

        A streamed reply still arriving is logged as far as it got first (``reply-progress``: what arrived since
        the last one), so the agent's words survive a death meanwhile.
        """
        self._log_progress()
        return AwaitPerson(deadline=deadline)

    def _log_progress(self) -> None:
        """Log what arrived of a streamed reply still arriving since the last time (``reply-progress``)."""
        stream = self.stream
        if stream is not None and stream.started and not stream.ended:
            arrived = stream.parser.text[stream.logged :]
            if arrived:
                stream.logged += len(arrived)
                self.record(ReplyProgressEvent(turn=self.state.turn, text=arrived))

    def _decide(self, opened: OpenSuggestion) -> Generator[Effect, Any, None]:
        """Put the suggestion to the person until it ends or is deferred."""
        while opened.id in self.state.open_suggestions:
            given = yield Consult(question=opened.suggestion())
            if isinstance(given, Thinking):
                deadline = opened.deadline
                given = yield self._await_person(None if deadline is None else max(0.0, deadline - self.clock()))
            if isinstance(given, Expired):
                self._expire(opened)
                return
            decision = as_decision(given.value)
            if isinstance(decision, Defer):
                self.record(DeferredEvent(subject_id=opened.id, kind="suggestion"))
                return
            yield from self._apply(opened, decision, by=given.by, via=given.via, roles=given.roles)
            if opened.deferred:  # an approval taken or refused: the next approver decides later
                return

    def _decided(
        self,
        opened: OpenSuggestion,
        decision: Accept | Dismiss | Edit | Say | Defer,
        by: str | None,
        via: str | None,
        roles: tuple[str, ...] = (),
        link: str | None = None,
    ) -> Generator[Effect, Any, None]:
        """Apply a decision that arrived later; a refusal leaves the suggestion deferred again."""
        if isinstance(decision, Defer):
            self.record(DeferredEvent(subject_id=opened.id, kind="suggestion"))
            return
        yield from self._apply(opened, decision, by=by, via=via, roles=roles, link=link)
        if opened.id in self.state.open_suggestions and opened.deciding and not opened.deferred:
            self.record(DeferredEvent(subject_id=opened.id, kind="suggestion"))

    def _refusing(
        self,
        refused: list[tuple[str, str, str]],
        by: str | None,
        roles: tuple[str, ...],
        now: float,
        decision: Literal["dismiss", "say"] | None = None,
    ) -> Generator[Effect, Any, None]:
        """Record why ``by`` may not end these suggestions (each id with a code and a hint) by ``decision``
        (``None``: an approval), at ``now``, the time the rules were asked at: they wait on."""
        for suggestion_id, code, hint in refused:
            refusal = ApprovalRefusedEvent(
                suggestion_id=suggestion_id, code=code, hint=hint, by=by, roles=roles, decision=decision
            )
            self.record(refusal, now)
            opened = self.state.open_suggestions[suggestion_id]
            if not opened.deferred:  # asked in the call: the next decider decides later
                self.record(DeferredEvent(subject_id=suggestion_id, kind="suggestion"))
        return
        yield  # makes this a generator that yields nothing

    def _apply(
        self,
        opened: OpenSuggestion,
        decision: Accept | Dismiss | Edit | Say,
        *,
        by: str | None = None,
        via: str | None = None,
        roles: tuple[str, ...] = (),
        link: str | None = None,
    ) -> Generator[Effect, Any, None]:
        """Apply one decision of the person's (``by`` whom, ``via`` which surface, holding ``roles``, through the
        single-use ``link`` of that id) as the decision machine's verdict says (the fold's
        :meth:`~dial_runtime.runtime.state.OpenSuggestion.verdict`, asked before anything is recorded): a
        decision after the deadline expires the suggestion; one the rules refuse is logged as refused and the
        suggestion waits on; an approval short of the policy's count, or a dismissal that is a vote, waits for
        the next; any other ends the suggestion, refuses its payload, or runs it."""
        now = self.clock()
        kind = _DECISION_KINDS[type(decision)]
        ended = self.state.superseded(opened) if kind == "say" else (opened,)
        roles = deciding_roles(ended, roles) if roles else ()  # no roles held: none to log, whatever the policy
        verdict = opened.verdict(kind, by, roles, now)
        if verdict == "expired":
            self._expire(opened, by=by, via=via, at=now)
            return
        refused = refusals(ended[:1], kind, by, roles, now) if verdict in DECISION_REFUSALS else []
        if kind == "say":  # the words end every other waiting suggestion too
            refused += refusals(ended[1:], "supersede", by, roles, now)
        if refused:
            refused_as: Literal["dismiss", "say"] | None = (
                "dismiss" if isinstance(decision, Dismiss) else "say" if isinstance(decision, Say) else None
            )
            yield from self._refusing(refused, by, roles, now, refused_as)
            return
        if isinstance(decision, Dismiss):
            self.record(
                DecidedEvent(suggestion_id=opened.id, decision="dismiss", by=by, via=via, roles=roles, link=link),
                now,
            )
            if verdict == "counted":
                self.record(DeferredEvent(subject_id=opened.id, kind="suggestion"))  # a vote: it waits on
                return
            done_before = opened.done_before
            if done_before is None:
                self._finish(opened, None)
            else:
                self._finish(opened, None, code=ALREADY_DONE, hint=already_done(done_before))
            return
        if isinstance(decision, Say):
            said = DecidedEvent(
                suggestion_id=opened.id, decision="say", text=decision.text, by=by, via=via, roles=roles, link=link
            )
            self.record(said, now)
            for other in ended:  # the decision ended the one decided on; the words end the others
                self._finish(other, None if other is opened else "supersede")
            return
        if isinstance(decision, Edit):
            edited_payload = to_json_ready(decision.payload)
            unkept = _not_kept(decision.payload, edited_payload)
            if unkept is not None:  # refused as it stands: the payload waiting stays the one the person saw
                self._refuse_payload(opened, unkept, None)
                return
            self.record(
                DecidedEvent(
                    suggestion_id=opened.id,
                    decision="edit",
                    payload=edited_payload,
                    previous=opened.payload,
                    by=by,
                    via=via,
                    roles=roles,
                    link=link,
                ),
                now,
            )
        else:
            accepted = DecidedEvent(
                suggestion_id=opened.id, decision="accept", by=by, via=via, roles=roles, link=link
            )
            self.record(accepted, now)
        if verdict == "counted":  # the fold counted this approval: the policy needs more
            policy = opened.policy
            assert policy is not None  # only a policy counts approvals
            self.record(
                ApprovalWaitingEvent(suggestion_id=opened.id, approvers=opened.approvers, needed=policy.approvals)
            )
            return
        if opened.precondition:  # the premise it was shown on must hold still, or it lapses
            lapsed = yield self._check(opened)
            if lapsed is not None:
                self._lapse(opened, lapsed)
                return
        edited = opened.edited
        # The flow may have moved since the suggestion was made.
        refusal = None if self.flow is None else self._flow_refusal(opened.action)
        # A refused edit is shown again as edited: its preview must read the payload the person now decides on.
        reviewed: Reviewed = (
            Reviewed(issue=refusal)
            if refusal is not None
            else (
                yield Review(
                    action=opened.action,
                    payload=opened.payload,
                    preview=edited,
                    refused_too=edited,
                    suggestion_id=opened.id,
                )
            )
        )
        issue = reviewed.issue
        if issue is None:
            self._ran(opened, (yield self._start(opened, reviewed.preview if edited else opened.preview)))
            return
        self._refuse_payload(opened, issue, (reviewed.preview or None) if edited else None)

    def _expire(
        self, opened: OpenSuggestion, *, by: str | None = None, via: str | None = None, at: float | None = None
    ) -> None:
        """End a suggestion whose deadline passed before the person decided: ``dismissed``, ``expired`` (``by``
        and ``via``: whose decision came too late, and through which surface; ``at``: when it came)."""
        self.record(DecidedEvent(suggestion_id=opened.id, decision="expire", by=by, via=via), at)
        self._finish(opened, None, expired=True)

    def _check(self, opened: OpenSuggestion) -> CheckPrecondition:
        """Ask the domain whether the premise of ``opened`` holds."""
        return CheckPrecondition(suggestion_id=opened.id, action=opened.action, payload=opened.payload)

    def _lapse(self, opened: OpenSuggestion, issue: Issue) -> None:
        """End a waiting suggestion whose premise no longer holds: ``invalid``, with the domain's reason."""
        self._finish(opened, "lapse", code=issue.code or PRECONDITION_FAILED, field=issue.field, hint=issue.hint)

    def _refuse_payload(self, opened: OpenSuggestion, issue: Issue, preview: str | None) -> None:
        """Refuse the payload the person decided on (``preview``: of a refused edit, ``None`` when the flow or
        the payload's size refused it first); the third refusal ends the suggestion ``invalid``."""
        self.record(
            RefusedEvent(
                suggestion_id=opened.id,
                payload=opened.payload,
                code=issue.code,
                field=issue.field,
                hint=issue.hint,
                preview=preview,
            )
        )
        if SUGGESTION.is_final(opened.state):
            self._finish(opened, None, code=issue.code, field=issue.field, hint=issue.hint, edited=opened.edited)

    def _start(self, opened: OpenSuggestion, preview: str) -> RunAction:
        """Start the action (``preview``: the text for what runs): its start, with the run's idempotency key, goes
        on the log before it runs."""
        key = self._run_key(opened.id)
        self.record(
            ActionStartedEvent(
                suggestion_id=opened.id,
                action=opened.action,
                payload=opened.payload,
                preview=preview,
                edited=opened.edited,
                key=key,
            )
        )
        return RunAction(action=opened.action, payload=opened.payload, key=key)

    def _run_key(self, suggestion_id: str) -> str:
        """The idempotency key of the run of ``suggestion_id``: of the conversation (its id, and the time its log
        began, so an id used again for another log, in another store or after a deletion, gives other keys), the
        suggestion, and the attempt (a suggestion runs at most once: 1)."""
        times = self.log.times
        return idempotency_key(self.conversation_id, times[0] if times else None, suggestion_id, 1)

    def _ran(self, opened: OpenSuggestion, ran: Ran | RunFailed, *, reconciled: bool = False) -> None:
        """End the action started by :meth:`_start`: its success or exception decides the outcome (``reconciled``:
        the domain told it after a dead process's run)."""
        edited = opened.edited
        if isinstance(ran, RunFailed):
            error = ran.error
            if not deliberate(error):  # its text may hold anything (a DSN, a path, a key)
                unexpected = f"the action raised {type(error).__name__}"
                self._finish(
                    opened, "fail", error=unexpected, code=UNEXPECTED_ERROR, edited=edited, reconciled=reconciled
                )
                return
            self._finish(
                opened,
                "fail",
                error=str(error) or type(error).__name__,
                code=_text_attribute(error, "code"),
                field=_text_attribute(error, "field"),
                hint=_text_attribute(error, "hint"),
                edited=edited,
                reconciled=reconciled,
            )
            return
        assert isinstance(ran, Ran)
        status = self._finish(
            opened, "succeed", result=to_json_ready(ran.result), edited=edited, reconciled=reconciled
        )
        if self.flow is not None:
            self._move_flow(self.flow, opened, status)

    # --- the domain's flow -------------------------------------------------------------------------------------

    def _flow_state(self) -> str:
        state = self.state.flow_state
        assert state is not None  # a state folded with the flow's table starts at its initial state
        return state

    def _flow_refusal(self, action: str) -> Issue | None:
        """``not-allowed-now`` when ``action`` fires a flow event that the flow's current state does not allow."""
        flow = self.flow
        return None if flow is None else flow.allowed_now(self._flow_state(), action)

    def _move_flow(self, flow: FlowRules, opened: OpenSuggestion, status: OutcomeStatus) -> None:
        """Fire the flow event bound to the action of a suggestion that ended ``status`` (only ``done`` fires;
        it was allowed when the suggestion was reviewed and again when accepted). A final flow state ends the
        conversation, with the state's name as its result."""
        event = flow.event_of(opened.action)
        if event is None or status not in MOVES_FLOW:
            return
        source = self._flow_state()
        target = flow.table.fire(source, event)
        self.record(
            FlowMovedEvent(
                source=source, target=target, event=event, suggestion_id=opened.id, action=opened.action
            )
        )
        if flow.table.is_final(target):
            self.record(EndedEvent(reason=f"the {flow.name} flow reached {target!r}", result=target))

    def _finish(
        self,
        opened: OpenSuggestion,
        trigger: OutcomeTrigger | None,
        *,
        preview: str | None = None,
        result: Any = None,
        error: str | None = None,
        code: str | None = None,
        field: str | None = None,
        hint: str | None = None,
        edited: bool = False,
        expired: bool = False,
        reconciled: bool = False,
    ) -> OutcomeStatus:
        """Record the outcome of a suggestion, ended by ``trigger`` (an event of its machine; ``None`` when an
        earlier entry ended it), with the status the fold says the trigger gives; return the status. The fields
        are the :class:`Outcome`'s, passed on one by one (see :attr:`OutcomeEvent.outcome`)."""
        status = opened.ends_with(trigger)
        shown = opened.preview if preview is None else preview
        event = OutcomeEvent(
            id=opened.id,
            action=opened.action,
            status=status,
            preview="" if status == "invalid" else shown,
            result=result,
            error=error,
            code=code,
            field=field,
            hint=hint,
            edited=edited,
            expired=expired,
            reconciled=reconciled,
            trigger=trigger,
        )
        self.record(event)
        if self._outcomes is not None:
            self._outcomes.append(self.state.owed_outcomes[-1])
        return status

    def _interrupt(self, opened: OpenSuggestion, why: str) -> None:
        """End a suggestion its turn no longer carries (the machine's ``interrupt``): an action that was running
        fails as ``interrupted``, its effect unknown; anything else is superseded."""
        if opened.state in RUNNING:
            self._finish(opened, "interrupt", error=why, code="interrupted", hint=UNKNOWN_EFFECT)
        else:  # one a decision ended already (words said instead) has its outcome owed still
            self._finish(opened, None if SUGGESTION.is_final(opened.state) else "interrupt")

    def _abandon(self, why: str) -> None:
        """Give every open suggestion, and the reply's unhandled ones, their outcome after an interruption;
        asks waiting for an answer are closed without one."""
        state = self.state
        for opened in list(state.open_suggestions.values()):
            self._interrupt(opened, why)
        for ask_id in [*state.asked, *state.open_asks]:
            self.record(AnsweredEvent(ask_id=ask_id, text=""))
        if "handled" not in TURN_LOOP.allowed(state.loop):
            return
        received = self.stream.parser.text if self.stream is not None else state.reply
        try:
            envelope = parse(received or "", schema=False)
        except DialSizeError:
            envelope = None
        remaining = envelope.elements if envelope is not None else ()
        index = self._unhandled()
        while index < len(remaining):
            element = remaining[index]
            if isinstance(element, Suggest):
                payload, _, after = pair_payload(remaining, index)
                self._interrupt(self._propose(element, to_json_ready(payload), after - 1), why)
                index = after
            else:
                index += 1


def _timed(shown: SuggestionEvent, now: float, seconds: float | None, spec: ActionSpec) -> SuggestionEvent:
    """A suggestion shown at ``now`` that waits for the person, with its times: a deadline ``seconds`` later,
    and the spec's reminder and escalation; each also in the seconds it was given in (what a replay answers).

    Apart from the suggestion built without them: most actions have none of these times, and each keyword a
    record is built with costs every suggestion (building it with all seven cost about 4,000 instructions a turn
    more, counted side by side with ``bench_compare.py --public --instructions``)."""
    remind_after, escalate_after = spec.remind_after, spec.escalate_after
    return msgspec.structs.replace(
        shown,
        deadline=None if seconds is None else now + seconds,
        remind_at=None if remind_after is None else now + remind_after,
        escalate_at=None if escalate_after is None else now + escalate_after,
        escalate_to=() if escalate_after is None else tuple(sorted(spec.escalate_to)),
        deadline_after=seconds,
        remind_after=remind_after,
        escalate_after=escalate_after,
    )


def idempotency_key(conversation: str | None, began: float | None, suggestion_id: str, attempt: int) -> str:
    """The idempotency key of a run: 32 hex digits of BLAKE2b over the conversation (its id, ``None`` for one
    without, and the time its log began), the suggestion and the attempt. It is the same wherever the log is
    read, differs for an id used again for another log, fits an HTTP header or an MCP ``_meta`` value, and tells
    nothing of the conversation's id.

    The time is written in hexadecimal (``float.hex``: exact, as ``repr`` is, in a third of its instructions) and
    hashed with BLAKE2b (two thirds of SHA-256's): this runs once per action, on the turn's path. A run started
    before keys were derived so keeps the key its ``action-started`` event records."""
    # Each text is prefixed with its length, so no two sets of values write the same text.
    named = "~" if conversation is None else f"{len(conversation)}:{conversation}"
    stamp = "~" if began is None else began.hex()
    named = f"{named}|{stamp}|{len(suggestion_id)}:{suggestion_id}|{attempt}"
    return hashlib.blake2b(named.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


#: Why words that say something was done are not confirmed, as the agent is told.
UNRAN_CLAIM: Final = "it says something was done, and nothing has run in this turn"


def _reply_number(ident: str) -> int:
    """The number of a reply id (``reply-3``), or 0 for an id that is none."""
    number = ident.removeprefix("reply-")
    return int(number) if number != ident and number.isdigit() else 0


_DECISION_KINDS: dict[type, str] = {Accept: "accept", Edit: "edit", Dismiss: "dismiss", Say: "say"}
"""The decision machine's event for each kind of decision the person gives."""

_HANDLERS: dict[str, Any] = {
    "dial-inform": ConversationCore._inform,
    "dial-acknowledge": ConversationCore._inform,
    "dial-declare": ConversationCore._declare,
    "dial-phatic": ConversationCore._phatic,
    "dial-delegate": ConversationCore._delegate,
    "dial-execute": ConversationCore._execute,
}
"""The handlers of the speech acts that need no waiting (a suggest and an ask may wait for the person)."""

#: Every speech act the turn loop handles (a test holds it equal to the lenient XSD's set).
HANDLED_ELEMENTS = frozenset([*_HANDLERS, "dial-suggest", "dial-ask"])
