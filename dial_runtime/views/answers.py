"""What the driver answered: the inputs a conversation's core was given, as its log holds them.

Every answer the driver gives the core is on the log, in the event the core records with it: the words of a call
and who said them, the domain's context (where it stands in the message sent), a reply (a streamed one with how
much had arrived when its elements were handled, a cut one with why), a deadline that passed, the domain's spec
and verdict on a suggestion, the person's decision or answer with who gave it, through which surface and holding
which roles, a run's result or error, a cancellation in its words. :class:`RecordedAnswers` reads them back by
what they answer, for a replay to feed the core again. It reads a log in the shape this version writes
(:func:`~dial_runtime.runtime.upgrade.upgraded` brings an older one there).

A process that died logs nothing at the moment it dies: what recovering from it records follows, in the next
call. The replay tells that apart by recovering a copy of its core and comparing (see
:mod:`dial_runtime.driver.replay`); :meth:`RecordedAnswers.only_recovery` says when the rest of a call could be
that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from ..errors import ActionError, RecordedError, TokenLimitReached
from ..runtime.core import OVERTAKEN, PROCESS_STOPPED, TOKEN_LIMIT
from ..runtime.effects import Answer, DeadlinePassed, Expired, NoReply, Ran, Replied, Reviewed, RunFailed, Streamed
from ..runtime.events import (
    ActionStartedEvent,
    AnsweredEvent,
    ApprovalRefusedEvent,
    AskEvent,
    AssignedEvent,
    ClaimedEvent,
    DecidedEvent,
    DeferredEvent,
    Event,
    InterruptedEvent,
    NoReplyEvent,
    OutcomeEvent,
    ProposedEvent,
    RefusedEvent,
    ReleasedEvent,
    ReplyCutEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyStartedEvent,
    ResumedEvent,
    SaidEvent,
    SendFailedEvent,
    SentEvent,
    SuggestionEvent,
    event_to_dict,
)
from ..runtime.records import Accept, ActionSpec, Ask, Defer, Dismiss, Edit, Issue, RuleVerdict, Say, Suggestion

__all__ = [
    "Cancelled",
    "RecordedAnswers",
    "RecordedCall",
    "Reply",
    "comparable",
    "recorded_raise",
    "same_events",
    "split_streamed_reply",
]

#: The events recovering from a dead process records.
_RECOVERY = frozenset({"outcome", "flow-moved", "ended", "deferred", "handled", "interrupted", "finished"})

#: The events a call cancelled from outside records after the point where it was cancelled.
_CANCELLING = frozenset({"reply-progress", "proposed", "outcome", "answered", "interrupted", "finished"})

#: The deadline that cut a reply, by the cause its ``reply-cut`` records.
_CUT_DEADLINES: dict[str, Literal["reply", "idle", "call"]] = {
    "reply-deadline": "reply",
    "idle-deadline": "idle",
    "call-deadline": "call",
}


class RecordedCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call of the recording as it was made: ``say`` (``words``, ``by``, ``roles``), ``decide`` (on the
    suggestion ``subject``: ``decision``, ``by``, ``via``, ``roles``, ``link``), ``answer`` (to the ask
    ``subject``: ``words``, ``by``), ``expire``, ``resume``, ``end`` (``words``: why), or ``claim`` (of the
    suggestion ``subject`` by ``by``, holding ``roles``, ``until``), ``release`` (``subject``, ``by``) or
    ``assign`` (``subject`` by ``by``, holding ``roles``, to ``person`` holding ``person_roles``, or ``role``)."""

    kind: Literal["say", "decide", "answer", "expire", "resume", "end", "claim", "release", "assign"]
    words: str = ""
    by: str | None = None
    roles: tuple[str, ...] = ()
    subject: str = ""
    decision: Accept | Dismiss | Edit | Say | Defer | None = None
    via: str | None = None
    link: str | None = None
    until: float = 0.0
    person: str | None = None
    person_roles: tuple[str, ...] = ()
    role: str | None = None


class Cancelled(msgspec.Struct, frozen=True):
    """The call was cancelled from outside here, in these words."""

    reason: str


#: What the recording holds in answer to a message sent: the reply, whole or as the pieces it streamed in;
#: that no reply came in time; the send's failure, as the agent raised it; a cancellation; or nothing at all.
Reply = Replied | NoReply | tuple[Streamed, ...] | RecordedError | Cancelled | None


class RecordedAnswers:
    """The answers of a recording (a log's events), read by what they answer, within the call being made
    (:meth:`enter`). An answer given once (a decision, an answer, a refusal) is taken when read: the next
    look-up for the same subject finds the next."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events
        self.call_start = 0
        self.call_end = len(events)
        self._taken: set[int] = set()

    def enter(self, start: int, end: int) -> None:
        """Read the call recorded at ``events[start:end]`` from now on."""
        self.call_start, self.call_end = start, end

    # --- the calls -----------------------------------------------------------------------------------------

    def call(self, start: int) -> RecordedCall:
        """The call whose first recorded event is ``events[start]``."""
        event = self.events[start]
        if isinstance(event, SaidEvent):
            return RecordedCall(kind="say", words=event.text, by=event.by)
        if isinstance(event, ClaimedEvent):
            return RecordedCall(
                kind="claim", subject=event.suggestion_id, by=event.by, roles=event.roles, until=event.until
            )
        if isinstance(event, ReleasedEvent):
            return RecordedCall(kind="release", subject=event.suggestion_id, by=event.by)
        if isinstance(event, AssignedEvent):
            return RecordedCall(
                kind="assign",
                subject=event.suggestion_id,
                by=event.by,
                roles=event.roles,
                person=event.person,
                person_roles=event.person_roles,
                role=event.role,
            )
        if not isinstance(event, ResumedEvent):
            return RecordedCall(kind="end", words=getattr(event, "reason", "end() was called"))
        if event.call == "say":
            said = self._after(start + 1, SaidEvent)
            if said is None:
                return RecordedCall(kind="say", roles=event.roles)
            return RecordedCall(kind="say", words=said.text, by=said.by, roles=event.roles)
        if event.call == "decide":
            return self._decision(start + 1)
        if event.call == "answer":
            given = self._after(start + 1, AnsweredEvent)
            if given is None:
                raise ValueError("replay: an answer call records its answer")
            return RecordedCall(kind="answer", subject=given.ask_id, words=given.text, by=given.by)
        return RecordedCall(kind=event.call)

    def _decision(self, position: int) -> RecordedCall:
        given = self._after(position, DecidedEvent, DeferredEvent, RefusedEvent, ApprovalRefusedEvent)
        if isinstance(given, DecidedEvent):
            return RecordedCall(
                kind="decide",
                subject=given.suggestion_id,
                decision=_decision(given),
                by=given.by,
                via=given.via,
                roles=given.roles,
                link=given.link,
            )
        if isinstance(given, DeferredEvent):
            return RecordedCall(kind="decide", subject=given.subject_id, decision=Defer())
        if isinstance(given, ApprovalRefusedEvent):  # a decision its policy did not take
            refused = (
                Dismiss() if given.decision == "dismiss" else Say("") if given.decision == "say" else Accept()
            )
            return RecordedCall(
                kind="decide", subject=given.suggestion_id, decision=refused, by=given.by, roles=given.roles
            )
        if isinstance(given, RefusedEvent):  # an edit refused before it was taken (a payload it could not keep)
            return RecordedCall(kind="decide", subject=given.suggestion_id, decision=Edit(given.payload))
        raise ValueError("replay: a decide call records the decision it was given")

    def person_could_answer(self) -> bool:
        """Whether the person could be asked at all: a recording whose asks were all left unasked was made with
        a person who had no ``answer``."""
        asks = [event for event in self.events if isinstance(event, AskEvent)]
        return not asks or any(event.asked for event in asks)

    def is_message(self, position: int) -> bool:
        """Whether ``events[position]`` is a message sent to the agent."""
        return isinstance(self._at(position), SentEvent)

    def finished(self) -> bool:
        """Whether the call being made got to its end (else its process died, and nothing recovered it)."""
        return any(event.type == "finished" for event in self.events[self.call_start : self.call_end])

    # --- the agent -----------------------------------------------------------------------------------------

    def context(self, position: int) -> str | None:
        """The domain's context the message sent at ``position`` holds."""
        sent = self._at(position)
        if not isinstance(sent, SentEvent) or sent.context is None:
            return None
        start, end = sent.context
        return sent.message[start:end]

    def reply(self, position: int) -> Reply:
        """What answered the message sent just before ``position``."""
        answer = self._after(
            position, ReplyEvent, ReplyStartedEvent, NoReplyEvent, SendFailedEvent, InterruptedEvent
        )
        if isinstance(answer, ReplyEvent):
            return Replied(answer.text, answer.provider)
        if isinstance(answer, NoReplyEvent):
            return NoReply(answer.seconds or 0.0, call=answer.call, cause=answer.cause)
        if isinstance(answer, SendFailedEvent):
            return RecordedError(answer.error)
        if isinstance(answer, InterruptedEvent):
            return Cancelled(answer.reason)
        if answer is None:
            return None
        return self._streamed(position, answer.turn)

    def _streamed(self, position: int, turn: int) -> tuple[Streamed, ...]:
        """A streamed reply, in the pieces it arrived in as far as it matters: up to each ``reply-progress`` (what
        had arrived when the call waited), up to where its elements were last handled before its end, then the
        rest with its end (and why it ended early, when it did); as far as the progress holds it, when its call
        stopped before its end."""
        events = self.events[position : self.call_end]
        progress = [e.text for e in events if isinstance(e, ReplyProgressEvent) and e.turn == turn]
        reply = next((e for e in events if isinstance(e, ReplyEvent) and e.turn == turn), None)
        if reply is None:
            return tuple(Streamed(chunks=(text,)) for text in progress if text)
        cuts, arrived = set(), 0
        for text in progress:
            arrived += len(text)
            cuts.add(arrived)
        if reply.handled_at is not None:
            cuts.add(reply.handled_at)
        text = reply.text
        pieces, begun = [], 0
        for at in sorted(cut for cut in cuts if 0 < cut < len(text)):
            pieces.append(Streamed(chunks=(text[begun:at],)))
            begun = at
        following = events.index(reply) + 1
        cut = events[following] if following < len(events) else None
        rest = (text[begun:],) if begun < len(text) else ()
        if isinstance(cut, ReplyCutEvent):
            ending = Streamed(
                chunks=rest, ended=True, passed=_passed(cut), failure=_failure(cut), provider=reply.provider
            )
        else:
            ending = Streamed(chunks=rest, ended=True, provider=reply.provider)
        pieces.append(ending)
        return tuple(pieces)

    # --- the domain ----------------------------------------------------------------------------------------

    def spec(self, suggestion_id: str) -> ActionSpec | None:
        """How the domain declared the action of ``suggestion_id``, as the suggestion it showed records it;
        ``None`` when the domain had no such action."""
        shown = self.about(suggestion_id, SuggestionEvent)
        if isinstance(shown, SuggestionEvent):
            return ActionSpec(
                mutates=shown.mutates,
                destructive=shown.destructive,
                handoff=shown.handoff,
                repeatable=shown.done_before is None,  # it matters only as far as it made done_before
                deadline=shown.deadline_after,
                policy=shown.policy,
                remind_after=shown.remind_after,
                escalate_after=shown.escalate_after,
                escalate_to=frozenset(shown.escalate_to),
                precondition=shown.precondition,
                recheck_every=shown.recheck_every,
            )
        ended = self.about(suggestion_id, OutcomeEvent)
        if isinstance(ended, OutcomeEvent) and ended.code == "unknown-action":
            return None
        return ActionSpec(mutates=True)  # never shown: its review ended it, and nothing more of the spec mattered

    def lapsed(self, suggestion_id: str, position: int) -> Issue | None:
        """Whether the domain found the premise of ``suggestion_id`` no longer holding when it was checked at
        ``position``: its outcome ``lapse`` is what the recording holds there (after the call's start, and the
        lapses of the others checked with it), with the domain's reason; ``None`` (it held: a check that holds
        leaves no trace) otherwise."""
        for event in self.events[position : self.call_end]:
            if isinstance(event, ResumedEvent):
                continue
            if not isinstance(event, OutcomeEvent) or event.trigger != "lapse":
                return None
            if event.id == suggestion_id:
                return Issue(code=event.code, field=event.field, hint=event.hint)
        return None

    def ruled(self, suggestion_id: str) -> RuleVerdict | None:
        """What the application's rules said of ``suggestion_id``, as the suggestion it showed records it
        (``None``: no rule had an opinion, or it was never shown)."""
        shown = self.about(suggestion_id, SuggestionEvent)
        return shown.ruled if isinstance(shown, SuggestionEvent) else None

    def verdict(self, suggestion_id: str, *, proposed: bool) -> Reviewed:
        """The domain's verdict on the payload of ``suggestion_id``: when it was ``proposed``, the review that
        showed it (with its preview) or ended it ``invalid``; for a decision, the refusal or the start that
        followed it."""
        if proposed:
            verdict = self.about(suggestion_id, SuggestionEvent, OutcomeEvent)
            if isinstance(verdict, OutcomeEvent) and verdict.status == "invalid":
                return Reviewed(Issue(code=verdict.code or "", field=verdict.field, hint=verdict.hint))
            return Reviewed(None, verdict.preview if isinstance(verdict, (SuggestionEvent, OutcomeEvent)) else "")
        given = self.about(suggestion_id, RefusedEvent, ActionStartedEvent)
        if isinstance(given, RefusedEvent):
            self._take(given)
            return Reviewed(Issue(code=given.code, field=given.field, hint=given.hint), given.preview or "")
        return Reviewed(None, given.preview if isinstance(given, ActionStartedEvent) else "")

    def run(self, suggestion_id: str, action: str, payload: Any) -> Ran | RunFailed | None:
        """What the recorded run of ``action`` with ``payload`` for ``suggestion_id`` came to; ``None`` when the
        recording ran nothing like it."""
        started = self.about(suggestion_id, ActionStartedEvent)
        outcome = self.about(suggestion_id, OutcomeEvent)
        if not isinstance(started, ActionStartedEvent) or (started.action, started.payload) != (action, payload):
            return None
        return _ran(outcome) if isinstance(outcome, OutcomeEvent) else None

    def reconciled(self, suggestion_id: str) -> Ran | RunFailed | None:
        """What recovering from a dead process found of the run of ``suggestion_id``: its outcome marked
        ``reconciled``; ``None`` when the domain could not tell."""
        outcome = next((e for e in self.events if isinstance(e, OutcomeEvent) and e.id == suggestion_id), None)
        if outcome is None or not outcome.reconciled:
            return None
        return _ran(outcome)

    # --- the person ----------------------------------------------------------------------------------------

    def person(self, question: Ask | Suggestion) -> Answer | Expired:
        """The person's answer to ``question``: an answer to an ask, a decision on a suggestion (with who gave
        it, through which surface, holding which roles), a deferral, or the deadline that passed first; what was
        never given is an empty answer, or a dismissal."""
        if isinstance(question, Ask):
            given = self.about(question.id, AnsweredEvent, DeferredEvent)
            self._take(given)
            if isinstance(given, AnsweredEvent):
                return Expired() if given.expired else Answer(given.text, by=given.by)
            return Answer(Defer()) if given is not None else Answer("")
        given = self.about(question.id, DecidedEvent, DeferredEvent, OutcomeEvent)
        if isinstance(given, (DecidedEvent, DeferredEvent)):
            self._take(given)
        if isinstance(given, DecidedEvent):
            if given.decision == "expire":
                return Expired()
            return Answer(_decision(given), by=given.by, via=given.via, roles=given.roles)
        return Answer(Defer()) if isinstance(given, DeferredEvent) else Answer(Dismiss())

    def waited_at(self, position: int) -> bool:
        """Whether the call waited for the person at ``position`` (what had arrived of a streamed reply was
        logged as it began to)."""
        return isinstance(self._at(position), ReplyProgressEvent)

    # --- how a call stopped --------------------------------------------------------------------------------

    def cancelled(self, position: int, progress: str) -> str | None:
        """The words of the cancellation that stopped the call at ``position``, if it stopped there: what follows
        is what a cancellation records (and the progress it logged is ``progress``, what arrived since)."""
        rest = self.events[position : self.call_end]
        cancelled = next((e for e in rest if isinstance(e, InterruptedEvent)), None)
        if (
            cancelled is None
            or cancelled.reason == PROCESS_STOPPED
            or not all(e.type in _CANCELLING for e in rest)
            or rest[-1].type != "finished"
        ):
            return None
        logged = rest[0] if isinstance(rest[0], ReplyProgressEvent) else None
        return cancelled.reason if logged is None or logged.text == progress else None

    def only_recovery(self, position: int) -> bool:
        """Whether what the call holds from ``position`` on is of the kinds recovering from a death records."""
        return all(event.type in _RECOVERY for event in self.events[position : self.call_end])

    # --- finding an answer ---------------------------------------------------------------------------------

    def about(self, subject: str, *kinds: type[Event]) -> Event | None:
        """The first event of the call being made (or later) of one of ``kinds`` that concerns ``subject`` and
        is not taken: ids are unique in a conversation, so where a replay stands does not matter."""
        for index in range(self.call_start, len(self.events)):
            event = self.events[index]
            if index not in self._taken and isinstance(event, kinds) and subject in _subjects(event):
                return event
        return None

    def _take(self, event: Event | None) -> None:
        for index in range(self.call_start, len(self.events)):
            if self.events[index] is event:
                self._taken.add(index)
                return

    def _after(self, position: int, *kinds: type[Any]) -> Any:
        for event in self.events[position : self.call_end]:
            if isinstance(event, kinds):
                return event
        return None

    def _at(self, position: int) -> Event | None:
        return self.events[position] if position < len(self.events) else None

    # --- another reply in the recording's place ------------------------------------------------------------

    def declared(self, action: str) -> ActionSpec:
        """The spec of ``action`` as the recording showed a suggestion of it (an action it never showed counts
        as one that waits for the person)."""
        shown = next((e for e in self.events if isinstance(e, SuggestionEvent) and e.action == action), None)
        if shown is None:
            return ActionSpec(mutates=True)
        return ActionSpec(mutates=shown.mutates, destructive=shown.destructive, handoff=shown.handoff)

    def verdict_on(self, action: str, payload: Any) -> Reviewed | None:
        """How the recording judged a proposal of ``action`` with ``payload``, wherever it did: shown (with its
        preview), or refused when proposed (with the domain's issue); ``None`` when it never judged it."""
        events = self.events
        for event in events:
            if isinstance(event, SuggestionEvent) and (event.action, event.payload) == (action, payload):
                return Reviewed(None, event.preview)
        shown = {event.id for event in events if isinstance(event, SuggestionEvent)}
        proposed = {
            event.id
            for event in events
            if isinstance(event, ProposedEvent) and (event.action, event.payload) == (action, payload)
        }
        for event in events:
            if isinstance(event, OutcomeEvent) and event.id in proposed - shown and event.status == "invalid":
                return Reviewed(Issue(code=event.code, field=event.field, hint=event.hint))
        return None

    def run_of(self, action: str, payload: Any) -> Ran | RunFailed | None:
        """What the recording's run of ``action`` with ``payload`` came to, wherever it ran; ``None`` when it
        never ran it."""
        for event in self.events:
            if isinstance(event, ActionStartedEvent) and (event.action, event.payload) == (action, payload):
                ended = self.about(event.suggestion_id, OutcomeEvent)
                if isinstance(ended, OutcomeEvent):
                    return _ran(ended)
        return None


def _subjects(event: Event) -> tuple[object, ...]:
    """The ids an event is about (a suggestion's or an ask's)."""
    return (
        getattr(event, "id", None),
        getattr(event, "suggestion_id", None),
        getattr(event, "subject_id", None),
        getattr(event, "ask_id", None),
    )


def _decision(event: DecidedEvent) -> Accept | Dismiss | Edit | Say:
    """The decision a ``decided`` event records (``expire`` is a deadline: answered as one)."""
    if event.decision == "dismiss":
        return Dismiss()
    if event.decision == "edit":
        return Edit(event.payload)
    if event.decision == "say":
        return Say(event.text or "")
    return Accept()


def _ran(outcome: OutcomeEvent) -> Ran | RunFailed:
    if outcome.status == "failed":
        return RunFailed(
            ActionError(outcome.error or "", code=outcome.code, field=outcome.field, hint=outcome.hint)
        )
    return Ran(outcome.result)


def _passed(cut: ReplyCutEvent) -> DeadlinePassed | None:
    """The deadline that cut a recorded reply, as the driver reported it."""
    deadline = _CUT_DEADLINES.get(cut.cause)
    return None if deadline is None else DeadlinePassed(deadline=deadline, seconds=cut.seconds or 0.0)


def _failure(cut: ReplyCutEvent) -> Exception | None:
    """The failure of a recorded stream that broke off or reached the token limit, as the agent raised it."""
    if cut.cause in _CUT_DEADLINES:
        return None
    if cut.cause == "token-limit":
        return TokenLimitReached(TOKEN_LIMIT)
    return RecordedError(cut.error or "")


# --- comparing a replay with its recording --------------------------------------------------------------------


def same_events(recorded: Sequence[Event], replayed: Sequence[Event], *, with_ids: bool, with_keys: bool) -> bool:
    """Whether a replayed call recorded exactly the recording's events, as :func:`comparable` compares them: the
    quick check a replay makes before it looks for where they differ."""
    if len(recorded) != len(replayed):
        return False
    for theirs, ours in zip(recorded, replayed, strict=True):
        if theirs == ours:
            continue
        if not with_ids and isinstance(theirs, SentEvent) and isinstance(ours, SentEvent):
            theirs = msgspec.structs.replace(theirs, message_id=ours.message_id)
        elif not with_keys and isinstance(theirs, ActionStartedEvent) and isinstance(ours, ActionStartedEvent):
            theirs = msgspec.structs.replace(theirs, key=ours.key)
        if theirs != ours:
            return False
    return True


def comparable(event: Event, *, with_ids: bool, with_keys: bool) -> dict[str, Any]:
    """An event as a replay compares it: a message without its id when the replay was not given the
    conversation's id, and a run without its idempotency key then too, or when the recording's runs carry none
    (it predates keys)."""
    shown = event_to_dict(event)
    if not with_ids and shown["type"] == "sent":
        shown.pop("message_id", None)
    elif not with_keys and shown["type"] == "action-started":
        shown.pop("key", None)
    return shown


def split_streamed_reply(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A streamed turn's events (compared forms) without its ``reply`` (and ``reply-cut``), and those: a streamed
    reply is recorded once its end is taken, which may fall anywhere among the events its elements cause.
    ``reply-progress`` is left out: how much of a reply had arrived when the person was asked depends on
    timing, not on the code."""
    if not any(event["type"] == "reply-started" for event in events):
        return events, []
    kept = [e for e in events if e["type"] not in ("reply", "reply-cut", "reply-progress")]
    return kept, [e for e in events if e["type"] in ("reply", "reply-cut")]


def recorded_raise(events: Sequence[Event]) -> str | None:
    """What a recorded call raised: a failed send's error, or the words of what cancelled it."""
    for event in events:
        if isinstance(event, SendFailedEvent):
            return event.error
        if isinstance(event, InterruptedEvent) and event.reason not in (PROCESS_STOPPED, OVERTAKEN):
            return event.reason
    return None
