"""Replay a recorded conversation through the conversation core, and report where it diverges.

A recording is a conversation's log. Each call it holds (``say``, ``decide``, ``answer``, ``resume``, ``end``) is
made again on a fresh :class:`~dial_runtime.runtime.core.ConversationCore`, with no event loop and no clock: the
loop below answers every effect the core yields with what the recording holds for it, as inputs of the effect
protocol (the reply, or the streamed reply as far as it arrived; the person's decisions and answers, with who
gave them; the actions' results and errors; a deadline that passed; a cancellation, in the words it was logged
in; a process that died). What the core records is compared, call by call and turn by turn, with what the
recording holds, so a change in the runtime shows up as a list of :class:`Divergence`.

A replay is dry, and nothing in it runs: the recording answers for the domain too (whether an action exists and
how it is declared, each ``validate`` verdict, each preview, each result), so an untouched log replays
identical, whatever state the domain is in now. ``recheck=True`` asks the domain instead of the log for
``actions``, ``validate`` and ``preview`` (never ``run``): a verdict that depends on the domain's state may then
differ, and the divergence says the domain answered otherwise. An action the core would start where the
recording ran nothing like it is not run either: it fails with code ``not-run-in-replay``, and the report lists
it under ``not_run``.

Where the recording's process died (what follows is what :meth:`ConversationCore.recover` records, or nothing),
the replayed call is closed at the same point and the next call recovers, as ``Conversation.open`` does.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import msgspec

from ..errors import ActionError, DialSizeError, Interruption, NotWaiting, RecordedError, TokenLimitReached
from ..language.records import Acknowledge, Inform
from ..language.stream import StreamParser
from ..runtime.core import (
    CUT,
    PROCESS_STOPPED,
    TOKEN_LIMIT,
    Call,
    ConversationCore,
    deadline_words,
    no_reply_words,
    reason,
)
from ..runtime.effects import (
    Answer,
    AwaitPerson,
    AwaitStream,
    Consult,
    DeadlinePassed,
    Effect,
    EndStream,
    Expired,
    GetContext,
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
from ..runtime.events import (
    ActionStartedEvent,
    AnsweredEvent,
    ApprovalRefusedEvent,
    DecidedEvent,
    DeferredEvent,
    Event,
    InformEvent,
    InterruptedEvent,
    LogEntry,
    NoReplyEvent,
    OutcomeEvent,
    ProposedEvent,
    RefusedEvent,
    ReplyCutEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyRefusedEvent,
    ResumedEvent,
    SaidEvent,
    SendFailedEvent,
    SentEvent,
    SuggestionEvent,
    event_to_dict,
)
from ..runtime.flow import FlowRules
from ..runtime.records import Accept, ActionSpec, Ask, Defer, Dismiss, Edit, Issue, Say, as_action_spec, as_issue
from ..runtime.state import upgraded
from ..views.calls import call_starts
from ..views.person import not_waiting

__all__ = ["NOT_RUN", "Divergence", "HandledReply", "NotRun", "ReplayReport", "handle_reply", "replay"]

#: The code of the outcome of an action a replay did not run, because the recording never ran it.
NOT_RUN = "not-run-in-replay"

#: The events recovering from a dead process records.
_RECOVERY = frozenset({"outcome", "flow-moved", "ended", "deferred", "handled", "interrupted", "finished"})

#: The events a call cancelled from outside records after the point where it was cancelled.
_CANCELLING = frozenset({"reply-progress", "proposed", "outcome", "answered", "interrupted", "finished"})


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """Where a replayed call differs from the recording: the 1-based ``call``, the ``turn`` (as the runtime
    numbers turns), the event's ``position`` within that turn (0-based, counted in the recording when it holds the
    event, else in the replay), and the event on each side (``None`` where that side has none).

    Besides the log's events, a call that raised is closed by a ``{"type": "raised", "error": ...}`` entry, so a
    call that now raises, or raises something else, diverges too.
    """

    call: int
    turn: int
    position: int
    recorded: dict[str, Any] | None
    replayed: dict[str, Any] | None

    def __str__(self) -> str:
        where = f"call {self.call}, turn {self.turn}, event {self.position}"
        recorded, replayed = self.recorded, self.replayed
        if replayed is None:
            return f"{where}: recorded {_summary(recorded or {})}, missing from the replay"
        if recorded is None:
            return f"{where}: replayed {_summary(replayed)}, not in the recording"
        if recorded.get("type") != replayed.get("type"):
            return f"{where}: recorded {_summary(recorded)}, replayed {_summary(replayed)}"
        subject = next(
            (recorded[key] for key in ("id", "suggestion_id", "ask_id", "subject_id") if key in recorded), None
        )
        changes = [
            f"{key} recorded {before}, replayed {after}"
            for key in {**recorded, **replayed}
            if recorded.get(key) != replayed.get(key)
            for before, after in [_contrast(recorded.get(key), replayed.get(key))]
        ]
        name = recorded["type"] if subject is None else f"{recorded['type']} {subject}"
        return f"{where}: {name}: {'; '.join(changes)}"


class NotRun(msgspec.Struct, frozen=True, kw_only=True):
    """An action the replay would have started where the recording ran nothing like it: the 1-based ``call``,
    the suggestion, the action and its payload."""

    call: int
    suggestion_id: str
    action: str
    payload: Any

    def __str__(self) -> str:
        return (
            f"call {self.call}: would have run {self.action} {_short(self.payload)} ({self.suggestion_id}); "
            "the recording holds no result for it, so it was not run"
        )


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a replay came to: the calls made, the turns run (messages the recorded agent answered or not), every
    divergence from the recording, in order, and the actions it did not run; ``rechecked``: whether the domain
    answered for the log (then a divergence may be the domain's, not the runtime's)."""

    calls: int
    turns: int
    divergences: tuple[Divergence, ...] = ()
    not_run: tuple[NotRun, ...] = ()
    rechecked: bool = False

    @property
    def ok(self) -> bool:
        """Whether the replay produced exactly the recorded events."""
        return not self.divergences

    def __str__(self) -> str:
        head = f"replayed {self.calls} call(s), {self.turns} turn(s)"
        if self.ok:
            return f"{head}: identical to the recording"
        lines = [f"{head}: {len(self.divergences)} divergence(s)"]
        if self.rechecked:
            lines.append("  (the domain was asked again: a verdict that differs is the domain's)")
        lines.extend(f"  {divergence}" for divergence in self.divergences)
        lines.extend(f"  {skipped}" for skipped in self.not_run)
        return "\n".join(lines)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _contrast(recorded: Any, replayed: Any) -> tuple[str, str]:
    """Two differing values, shortened; two long texts from a little before where they first differ."""
    if not (isinstance(recorded, str) and isinstance(replayed, str)) or max(len(recorded), len(replayed)) < 70:
        return _short(recorded), _short(replayed)
    same, shorter = 0, min(len(recorded), len(replayed))
    while same < shorter and recorded[same] == replayed[same]:
        same += 1
    start = max(same - 20, 0)
    mark = "…" if start else ""
    return mark + _short(recorded[start:]), mark + _short(replayed[start:])


def _summary(event: dict[str, Any]) -> str:
    rest = {key: value for key, value in event.items() if key != "type"}
    return f"{event.get('type')} {_short(rest, 160)}"


class _Cancelled(BaseException):
    """A cancellation of the recording's call, as the replay throws it in (wrapped in an Interruption that
    carries the words the recording logged)."""


def _passed(cut: ReplyCutEvent) -> DeadlinePassed | None:
    """The deadline that cut a recorded reply, as the driver reported it."""
    if cut.cause == "reply-deadline":
        return DeadlinePassed(deadline="reply", seconds=cut.seconds or 0.0)
    if cut.cause == "idle-deadline":
        return DeadlinePassed(deadline="idle", seconds=cut.seconds or 0.0)
    if cut.cause == "call-deadline":
        return DeadlinePassed(deadline="call", seconds=cut.seconds or 0.0)
    return None


def _failure(cut: ReplyCutEvent) -> Exception | None:
    """The failure of a recorded stream that broke off or reached the token limit, as the agent raised it."""
    if cut.cause in ("reply-deadline", "idle-deadline", "call-deadline"):
        return None
    if cut.cause == "token-limit":
        return TokenLimitReached(TOKEN_LIMIT)
    return RecordedError(cut.error or "")


class _Died(Exception):
    """The recording's process died here: the replayed call is closed without another event."""


class _Recording:
    """The recorded events, and the answers the replay reads from them for the call being made."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events
        self.call_start = 0
        self.call_end = len(events)
        self._taken: set[int] = set()

    def after(self, position: int, *kinds: str) -> Event | None:
        """The first event of the call being made, at or after ``position``, of one of ``kinds``."""
        for event in self.events[position : self.call_end]:
            if event.type in kinds:
                return event
        return None

    def rest(self, position: int) -> Sequence[Event]:
        """The events of the call being made from ``position`` on (what recovering it recorded included)."""
        return self.events[position : self.call_end]

    def about(self, subject: str, *kinds: str) -> Event | None:
        """The first recorded event of the call being made (or later) of one of ``kinds`` that concerns
        ``subject`` and was not taken yet (see :meth:`take`): ids are unique in a conversation, so where the
        replay is from the recording's position does not matter."""
        for index in range(self.call_start, len(self.events)):
            event = self.events[index]
            if index not in self._taken and event.type in kinds and subject in _subjects(event):
                return event
        return None

    def take(self, event: Event) -> None:
        """Mark an answer given once (a decision, an answer, a refusal) used: the next look-up finds the next."""
        for index in range(self.call_start, len(self.events)):
            if self.events[index] is event:
                self._taken.add(index)
                return

    def at(self, position: int) -> Event | None:
        return self.events[position] if position < len(self.events) else None


class _Replayer:
    """Makes the recorded calls on a core and answers its effects from the recording (or, for what ``recheck``
    names, from the domain)."""

    def __init__(
        self,
        recorded: Sequence[Event],
        times: Sequence[float],
        *,
        domain: Any,
        recheck: bool,
        options: Mapping[str, Any],
    ) -> None:
        self.recording = _Recording(recorded)
        self.times = times
        self.domain = domain
        self.recheck = recheck
        self.options = options
        self.not_run: list[NotRun] = []
        self.calls = 0
        self.core = self._core(())
        self._waiting: Any = None  # the person's answer a Thinking deferred to the AwaitPerson that follows
        self._pieces: list[Streamed] = []  # the rest of a streamed reply, as it arrived
        self._words = ""

    def _core(self, entries: Iterable[LogEntry]) -> ConversationCore:
        rules = getattr(self.domain, "flow_rules", None)
        return ConversationCore(
            entries,
            max_turns=self.options["max_turns"],
            decide_timeout=self.options["decide_timeout"],
            answers=self.options["answers"],
            flow=rules if isinstance(rules, FlowRules) else None,
            conversation_id=self.options["conversation_id"],
            clock=self._time,
        )

    def _time(self) -> float:
        position = len(self.core.log)
        return self.times[position] if position < len(self.times) else (self.times[-1] if self.times else 0.0)

    @property
    def position(self) -> int:
        return len(self.core.log)

    # --- making a call -----------------------------------------------------------------------------------------

    def make(self, start: Event) -> str | None:
        """Make the call that ``start`` (its first recorded event) begins; what it raised, as the runtime words
        it, or ``None``."""
        self.calls += 1
        self.recover(self.core)  # a call a dead process left open is closed by the next, as Conversation does
        try:
            call = self._call(start)
        except NotWaiting as refused:  # a decision on what no longer waits: told as Conversation tells it
            return reason(not_waiting(self.core.log.entries(), refused))
        except Exception as refused:  # the call is refused at once
            return reason(refused)
        return self._drive(call)

    def _call(self, start: Event) -> Call | None:
        """The call ``start`` begins, made on the core (``None``: an ``end()``, done at once)."""
        core = self.core
        call: Call | None
        self._words = ""
        if isinstance(start, SaidEvent):
            self._words = start.text
            call = core.say(start.text, start.by)
        elif isinstance(start, ResumedEvent) and start.call == "say":
            said = self.recording.after(self.position + 1, "said")
            self._words = said.text if isinstance(said, SaidEvent) else ""
            call = core.say(self._words, said.by if isinstance(said, SaidEvent) else None, start.roles)
        elif isinstance(start, ResumedEvent) and start.call == "decide":
            given = self.recording.after(self.position + 1, "decided", "deferred", "refused", "approval-refused")
            call = self._decide(given)
        elif isinstance(start, ResumedEvent) and start.call == "expire":
            call = core.expire_due()
        elif isinstance(start, ResumedEvent) and start.call == "answer":
            given = self.recording.after(self.position + 1, "answered")
            assert isinstance(given, AnsweredEvent), "an answer call records its answer"
            call = core.answer(given.ask_id, given.text, given.by)
        elif isinstance(start, ResumedEvent):
            call = core.resume()
        else:
            core.end(getattr(start, "reason", "end() was called"))
            call = None
        return call

    def _decide(self, given: Event | None) -> Call:
        core = self.core
        if isinstance(given, DecidedEvent):
            return core.decide(
                given.suggestion_id, _decision(given), given.by, via=given.via, roles=given.roles, link=given.link
            )
        if isinstance(given, DeferredEvent):
            return core.decide(given.subject_id, Defer(), None)
        if isinstance(given, ApprovalRefusedEvent):  # a decision its policy did not take
            refused = (
                Dismiss() if given.decision == "dismiss" else Say("") if given.decision == "say" else Accept()
            )
            return core.decide(given.suggestion_id, refused, given.by, roles=given.roles)
        if isinstance(given, RefusedEvent):  # an edit refused before it was taken (a payload too large to keep)
            waiting = core.state.open_suggestions.get(given.suggestion_id)
            return core.decide(given.suggestion_id, Edit(waiting.payload if waiting else None), None)
        raise ValueError("replay: a decide call records the decision it was given")

    def _drive(self, call: Call | None) -> str | None:
        """Drive ``call`` to its end, answering each effect; what it raised, in the runtime's words."""
        if call is None:
            return None
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = call.send(value) if error is None else call.throw(error)
            except StopIteration:
                return None
            except Interruption as stopped:
                return stopped.why
            except Exception as raised:
                return reason(raised)
            value, error = None, None
            try:
                value = self._answer(effect)
            except _Died:
                call.close()
                return None
            except (Interruption, RecordedError) as thrown:
                error = thrown

    # --- answering the effects ---------------------------------------------------------------------------------

    def _answer(self, effect: Effect) -> Any:
        """The input the recording (or, with ``recheck``, the domain) gives for ``effect``."""
        if isinstance(effect, GetContext):
            return self._context()
        if isinstance(effect, Send):
            return self._reply(effect)
        if isinstance(effect, AwaitStream):
            return self._more()
        if isinstance(effect, LookUp):
            return self._spec(effect)
        if isinstance(effect, Review):
            return self._review(effect)
        if isinstance(effect, Consult):
            return self._consult(effect)
        if isinstance(effect, AwaitPerson):
            self._stopped_here()
            waiting, self._waiting = self._waiting, None
            return waiting
        if isinstance(effect, RunAction):
            return self._run(effect)
        if isinstance(effect, (Show, EndStream)):
            return None
        raise TypeError(f"replay: no answer for {type(effect).__name__}")

    def _stopped_here(self) -> None:
        """Raise what stopped the recording's call at this wait, if it stopped here (see :meth:`_stop`)."""
        stop = self._stop()
        if stop is not None:
            raise stop

    def _stop(self) -> BaseException | None:
        """What stopped the recording's call at the current point, if it stopped here: a cancellation, thrown in
        with the words it was logged in (what follows is what a cancellation records), or the process's death
        (what follows is what recovering records, or nothing)."""
        position = self.position
        rest = self.recording.rest(position)
        cancelled = next((e for e in rest if isinstance(e, InterruptedEvent)), None)
        if (
            cancelled is not None
            and cancelled.reason != PROCESS_STOPPED
            and all(e.type in _CANCELLING for e in rest)
            and rest[-1].type == "finished"
        ):
            progress = rest[0] if isinstance(rest[0], ReplyProgressEvent) else None
            if progress is None or progress.text == self._progress_now():
                return Interruption(cancelled.reason, _Cancelled())
        if self._dies_here(position, rest):
            return _Died()
        return None

    def _progress_now(self) -> str:
        stream = self.core.stream
        return "" if stream is None else stream.parser.text[stream.logged :]

    def _finished(self) -> bool:
        """Whether the recording's call got to its end (else its process died, and nothing recovered it)."""
        recording = self.recording
        return any(e.type == "finished" for e in recording.events[recording.call_start : recording.call_end])

    def _dies_here(self, position: int, rest: Sequence[Event]) -> bool:
        """Whether the recording's process died at this point: its call holds no more and never finished, or
        what follows is exactly what recovering from the log so far records."""
        if not rest:
            return position >= self.recording.call_end and not self._finished()
        if not all(event.type in _RECOVERY for event in rest):
            return False
        probe = self._core(self.core.log.entries())
        before = len(probe.log)
        self.recover(probe)
        return list(probe.log.events[before:]) == list(rest[: len(probe.log) - before])

    def _context(self) -> object:
        """The domain's context, as the recorded message holds it."""
        sent = self.recording.at(self.position)
        words, self._words = self._words, ""
        return self.core.context_in(sent.message, words) if isinstance(sent, SentEvent) else None

    def _reply(self, effect: Send) -> object:
        """What the recording's agent answered to this message."""
        self._stopped_here()
        answer = self.recording.after(
            self.position, "reply", "reply-started", "no-reply", "send-failed", "interrupted"
        )
        if isinstance(answer, ReplyEvent):
            return Replied(answer.text)
        if answer is None:
            if self._finished():  # the recording's call ended before this message: nothing answered it
                raise RecordedError("LookupError: the recording holds no answer to this message")
            raise _Died
        if isinstance(answer, NoReplyEvent):
            budget = NoReply(self.options["call_timeout"] or 0.0, call=True, cause=answer.cause)
            if answer.error == no_reply_words(budget):
                return budget
            return NoReply(self.options["timeout"] or 0.0, cause=answer.cause)
        if isinstance(answer, SendFailedEvent):
            raise RecordedError(answer.error)
        if isinstance(answer, InterruptedEvent):
            raise Interruption(answer.reason, _Cancelled())
        return self._streamed(effect.turn)

    def _streamed(self, turn: int) -> Streamed:
        """A streamed reply, arriving as the recording shows it arrived: as far as each ``reply-progress`` (what
        had arrived when the call waited for the person), then the rest with its end (and the deadline that cut
        it, if one did); a reply whose call stopped before its end arrives as far as the progress holds it."""
        events = self.recording.rest(self.position)
        progress = [e.text for e in events if isinstance(e, ReplyProgressEvent) and e.turn == turn]
        reply = next((e for e in events if isinstance(e, ReplyEvent) and e.turn == turn), None)
        pieces = [Streamed(chunks=(text,)) for text in progress if text]
        if reply is not None:
            rest = reply.text[sum(map(len, progress)) :]
            following = events.index(reply) + 1
            cut = events[following] if following < len(events) else None
            if not progress:  # the text shown while it streamed arrives first, alone, as it did then
                shown, rest = _shown_while_streaming(rest, events[: following - 1])
                pieces += [Streamed(chunks=(shown,))] if shown else []
            chunks = (rest,) if rest else ()
            if isinstance(cut, ReplyCutEvent):
                pieces.append(Streamed(chunks=chunks, ended=True, passed=_passed(cut), failure=_failure(cut)))
            else:  # a log written before reply-cut: a deadline's cut is in the refusal's words
                refusal = next(
                    (e for e in events if isinstance(e, ReplyRefusedEvent) and e.reason.startswith(CUT)), None
                )
                pieces.append(Streamed(chunks=chunks, ended=True, passed=self._deadline(refusal)))
        self._pieces = pieces[1:]
        return pieces[0] if pieces else Streamed()

    def _more(self) -> Streamed:
        """The next piece of the streamed reply, or what stopped its call here."""
        if self._pieces:
            return self._pieces.pop(0)
        self._stopped_here()
        raise _Died  # the recording holds no more of it, and its call did not stop here: it went no further

    def _deadline(self, cut: ReplyRefusedEvent | None) -> DeadlinePassed | None:
        """The deadline that cut the recorded reply: the one, of the replay's reply and idle deadlines, that the
        core words as the recording does."""
        if cut is None:
            return None
        candidates = [
            DeadlinePassed(deadline="reply", seconds=self.options["reply_timeout"] or 0.0),
            DeadlinePassed(deadline="idle", seconds=self.options["idle_timeout"] or 0.0),
        ]
        for passed in candidates:
            if cut.reason.startswith(CUT + deadline_words(passed)):
                return passed
        return candidates[0]

    def _spec(self, effect: LookUp) -> ActionSpec | None:
        if self.recheck:
            actions = getattr(self.domain, "actions", None)
            declared = actions.get(effect.action) if isinstance(actions, Mapping) else None
            return None if declared is None else as_action_spec(declared)
        ident = effect.suggestion_id
        shown = self.recording.about(ident, "suggestion")
        if isinstance(shown, SuggestionEvent):
            # Marked as done before only where the recording marked it: an action that is not repeatable is.
            return ActionSpec(
                mutates=shown.mutates,
                destructive=shown.destructive,
                handoff=shown.handoff,
                repeatable=shown.done_before is None,
                deadline=self._seconds_to(shown, shown.deadline),
                policy=shown.policy,
                remind_after=self._seconds_to(shown, shown.remind_at),
                escalate_after=self._seconds_to(shown, shown.escalate_at),
                escalate_to=frozenset(shown.escalate_to),
            )
        ended = self.recording.about(ident, "outcome")
        if isinstance(ended, OutcomeEvent) and ended.code == "unknown-action":
            return None
        return ActionSpec(mutates=True)  # never shown: its review ended it, and the spec said nothing more

    def _seconds_to(self, shown: SuggestionEvent, deadline: float | None) -> float | None:
        """The seconds that give the recorded time ``deadline`` (a deadline, a reminder, an escalation) exactly
        when added to the time the suggestion was shown, as the core adds them (the float nearest their
        difference, moved until the sum is exact)."""
        if deadline is None:
            return None
        at = next(index for index, event in enumerate(self.recording.events) if event is shown)
        began = self.times[at]
        seconds = deadline - began
        for _ in range(8):
            if began + seconds == deadline or seconds <= 0:
                break
            seconds = math.nextafter(seconds, math.inf if began + seconds < deadline else -math.inf)
        return seconds if seconds > 0 else None

    def _review(self, effect: Review) -> Reviewed:
        """The recorded verdict on the payload: the review that ended the suggestion ``invalid`` or showed it
        (with its preview), or, for a decision, the refusal or the start that followed it."""
        if self.recheck:
            return self._domain_review(effect)
        ident = effect.suggestion_id
        opened = self.core.state.open_suggestions.get(ident)
        if opened is not None and opened.state == "proposed":
            verdict = self.recording.about(ident, "suggestion", "outcome")
            if isinstance(verdict, OutcomeEvent) and verdict.status == "invalid":
                return Reviewed(Issue(code=verdict.code or "", field=verdict.field, hint=verdict.hint))
            return Reviewed(None, verdict.preview if isinstance(verdict, (SuggestionEvent, OutcomeEvent)) else "")
        verdict = self.recording.about(ident, "refused", "action-started")
        if isinstance(verdict, RefusedEvent):
            self.recording.take(verdict)
            issue = Issue(code=verdict.code, field=verdict.field, hint=verdict.hint)
            return Reviewed(issue, verdict.preview or "")
        return Reviewed(None, verdict.preview if isinstance(verdict, ActionStartedEvent) else "")

    def _domain_review(self, effect: Review) -> Reviewed:
        validate = getattr(self.domain, "validate", None)
        issue = None if validate is None else as_issue(validate(effect.action, effect.payload))
        if not effect.preview or (issue is not None and not effect.refused_too):
            return Reviewed(issue)
        preview = getattr(self.domain, "preview", None)
        text = preview(effect.action, effect.payload) if preview is not None else ""
        return Reviewed(issue, str(text) if text else effect.action)

    def _consult(self, effect: Consult) -> object:
        """The person's recorded answer: at once, or (when the recording shows the call waited for it: a
        ``reply-progress``, a deadline, a stop) through the :class:`AwaitPerson` that follows."""
        question = effect.question
        position = self.position
        if isinstance(question, Ask):
            given = self.recording.about(question.id, "answered", "deferred")
            if given is not None:
                self.recording.take(given)
            if isinstance(given, AnsweredEvent):
                answer: object = Expired() if given.expired else Answer(given.text, by=given.by)
            elif isinstance(given, DeferredEvent):
                answer = Answer(Defer())
            else:
                answer = Answer("")
        else:
            given = self.recording.about(question.id, "decided", "deferred", "outcome")
            if isinstance(given, (DecidedEvent, DeferredEvent)):
                self.recording.take(given)
            if isinstance(given, DecidedEvent):
                decision = _decision(given)
                answer = (
                    Expired()
                    if given.decision == "expire"
                    else Answer(decision, by=given.by, via=given.via, roles=given.roles)
                )
            elif isinstance(given, DeferredEvent):
                answer = Answer(Defer())
            else:
                answer = Answer(Dismiss())
        waited = self.recording.at(position)
        if isinstance(answer, Expired) or (waited is not None and waited.type == "reply-progress") or self._stop():
            self._waiting = answer  # the call waited for it (a stop at that wait is raised there)
            return Thinking()
        return answer

    def recover(self, core: ConversationCore) -> None:
        """Close what a dead process left open in ``core``, the domain's ``reconcile`` answered from the
        recording (:meth:`_reconcile`): nothing is asked of the domain."""
        recovery = core.recover()
        found: object = None
        while True:
            try:
                effect = recovery.send(found)
            except StopIteration:
                return
            assert isinstance(effect, Reconcile)
            found = self._reconcile(effect)

    def _reconcile(self, effect: Reconcile) -> object:
        """What the recording's recovery found of a dead process's run: the result of an outcome it recorded
        ``reconciled``, else that the domain could not tell."""
        wanted = effect.suggestion_id
        outcome = next((e for e in self.recording.events if isinstance(e, OutcomeEvent) and e.id == wanted), None)
        if outcome is None or not outcome.reconciled:
            return Unreconciled("the recording's recovery reconciled no run of it")
        if outcome.status == "failed":
            return RunFailed(
                ActionError(outcome.error or "", code=outcome.code, field=outcome.field, hint=outcome.hint)
            )
        return Ran(outcome.result)

    def _run(self, effect: RunAction) -> object:
        """What the recording's run of this action came to (never run here)."""
        self._stopped_here()
        started = self.core.log.events[-1]
        ident = started.suggestion_id if isinstance(started, ActionStartedEvent) else ""
        outcome = self.recording.about(ident, "outcome")
        recorded_start = self.recording.about(ident, "action-started")
        same = isinstance(recorded_start, ActionStartedEvent) and (
            recorded_start.action,
            recorded_start.payload,
        ) == (
            effect.action,
            effect.payload,
        )
        if not isinstance(outcome, OutcomeEvent) or not same:
            self.not_run.append(
                NotRun(call=self.calls, suggestion_id=ident, action=effect.action, payload=effect.payload)
            )
            return RunFailed(ActionError("not run: the recording holds no result for it", code=NOT_RUN))
        if outcome.status == "failed":
            return RunFailed(
                ActionError(outcome.error or "", code=outcome.code, field=outcome.field, hint=outcome.hint)
            )
        return Ran(outcome.result)


def _subjects(event: Event) -> tuple[object, ...]:
    """The ids an event is about (a suggestion's or an ask's)."""
    return (
        getattr(event, "id", None),
        getattr(event, "suggestion_id", None),
        getattr(event, "subject_id", None),
        getattr(event, "ask_id", None),
    )


def _decision(event: DecidedEvent) -> Accept | Dismiss | Edit | Say:
    """The decision a ``decided`` event records (``expire`` is a deadline: the replay answers it so)."""
    if event.decision == "dismiss":
        return Dismiss()
    if event.decision == "edit":
        return Edit(event.payload)
    if event.decision == "say":
        return Say(event.text or "")
    return Accept()


def _starts(events: Sequence[Event]) -> list[int]:
    """Where each call of the recording begins (:func:`~dial_runtime.views.calls.call_starts`)."""
    try:
        return call_starts(events)
    except ValueError as error:
        raise ValueError(f"replay: {error}") from None


class _Turns:
    """Numbers events by turn the way the runtime does: a ``say`` starts at turn 0, each message sent starts the
    turn it names, and a ``decide``, ``answer`` or ``resume`` goes on in the turn whose reply is being handled."""

    def __init__(self) -> None:
        self.turn = 0
        self.ended = False

    def number(self, events: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
        turns: dict[int, list[dict[str, Any]]] = {}
        for event in events:
            if event["type"] == "said" and not self.ended:
                self.turn = 0
            elif event["type"] == "sent":
                self.turn = event["turn"]
            elif event["type"] == "ended":
                self.ended = True
            turns.setdefault(self.turn, []).append(event)
        return turns


def _shown_while_streaming(reply: str, before: Sequence[Event]) -> tuple[str, str]:
    """The reply split where its elements shown before it ended (the ``inform`` events ``before`` its ``reply``)
    were complete, and nothing more had arrived: fed so, the core shows them as it did then, and a later part
    that voids the reply (a second envelope) comes after them, as it did. ``("", reply)`` when none were shown."""
    wanted = sum(1 for e in before if isinstance(e, InformEvent) and e.element is not None and e.element >= 0)
    if not wanted:
        return "", reply
    parser, complete, end = StreamParser(), 0, 0
    while complete < wanted:
        close = reply.find(">", end)
        if close < 0:
            return "", reply
        piece, end = reply[end : close + 1], close + 1
        with contextlib.suppress(DialSizeError):
            complete += sum(1 for element in parser.feed(piece) if isinstance(element, Inform | Acknowledge))
    return reply[:end], reply[end:]


def _streamed_reply(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A streamed turn's events without its ``reply`` (and ``reply-cut``), and those: a streamed reply is recorded
    once its end is taken, which may fall anywhere among the events its elements cause. ``reply-progress`` is
    left out: how much of a reply had arrived when the person was asked depends on timing, not on the code."""
    if not any(event["type"] == "reply-started" for event in events):
        return events, []
    kept = [e for e in events if e["type"] not in ("reply", "reply-cut", "reply-progress")]
    return kept, [e for e in events if e["type"] in ("reply", "reply-cut")]


def _compare(
    call: int, recorded: dict[int, list[dict[str, Any]]], replayed: dict[int, list[dict[str, Any]]]
) -> list[Divergence]:
    """The divergences of one call, turn by turn, aligning the two sides so one extra or missing event shows as
    that event alone (a streamed reply's text is compared on its own: its place among the events varies)."""
    found = []
    for turn in sorted({*recorded, *replayed}):
        theirs, their_reply = _streamed_reply(recorded.get(turn, []))
        ours, our_reply = _streamed_reply(replayed.get(turn, []))
        if their_reply != our_reply:
            found.append(
                Divergence(
                    call=call,
                    turn=turn,
                    position=len(theirs),
                    recorded=their_reply[0] if their_reply else None,
                    replayed=our_reply[0] if our_reply else None,
                )
            )
        matcher = difflib.SequenceMatcher(
            a=[json.dumps(e, sort_keys=True, default=str) for e in theirs],
            b=[json.dumps(e, sort_keys=True, default=str) for e in ours],
            autojunk=False,
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            for offset in range(max(i2 - i1, j2 - j1)):
                before = theirs[i1 + offset] if i1 + offset < i2 else None
                after = ours[j1 + offset] if j1 + offset < j2 else None
                position = i1 + offset if before is not None else j1 + offset
                found.append(Divergence(call=call, turn=turn, position=position, recorded=before, replayed=after))
    return found


def _compared(event: Event, *, with_ids: bool, with_keys: bool) -> dict[str, Any]:
    """An event as compared: a message without its id when the replay was not given the conversation's id, and
    a run without its idempotency key then too, or when the recording's runs carry none (it predates keys)."""
    shown = event_to_dict(event)
    if not with_ids and shown["type"] == "sent":
        shown.pop("message_id", None)
    elif not with_keys and shown["type"] == "action-started":
        shown.pop("key", None)
    return shown


def _recorded_raise(events: Sequence[Event]) -> str | None:
    """What the recorded call raised: a failed send's error, or the words of what cancelled it."""
    for event in events:
        if isinstance(event, SendFailedEvent):
            return event.error
        if isinstance(event, InterruptedEvent) and event.reason not in (
            PROCESS_STOPPED,
            "the person said something else",
        ):
            return event.reason
    return None


def replay(
    entries: Iterable[LogEntry | Event],
    *,
    domain: Any = None,
    recheck: bool = False,
    conversation_id: str | None = None,
    max_turns: int = 8,
    timeout: float | None = 90.0,
    decide_timeout: float | None = None,
    reply_timeout: float | None = 300.0,
    idle_timeout: float | None = 30.0,
    call_timeout: float | None = 300.0,
) -> ReplayReport:
    """Make the recorded calls again through the conversation core and compare what it records with the log.

    The recording answers every effect (see the module's description); ``domain`` gives the flow (a domain with
    one), and with ``recheck`` answers for ``actions``, ``validate`` and ``preview``. The options are the
    conversation's and should be the recording's: a ``no-reply`` names its ``timeout`` (or ``call_timeout``), a
    reply cut by a deadline the deadline's length, and ``conversation_id`` each message's id (without it, messages
    are compared without their ids). ``max_turns`` bounds each call as it did. ``ValueError`` for a log that does
    not begin with a call.
    """
    items = list(entries)
    recorded = [item.event if isinstance(item, LogEntry) else item for item in items]
    times = [item.time if isinstance(item, LogEntry) else 0.0 for item in items]
    recorded = upgraded(recorded, times)  # a log of an older version, in the shape the core records now
    starts = _starts(recorded)
    if timeout is None and any(event.type == "no-reply" for event in recorded):
        raise ValueError("replay: the recording has a no-reply; replay it with the timeout it was recorded with")
    with_ids = conversation_id is not None and any(getattr(e, "message_id", None) for e in recorded)
    with_keys = with_ids and any(isinstance(e, ActionStartedEvent) and e.key is not None for e in recorded)
    compared = partial(_compared, with_ids=with_ids, with_keys=with_keys)
    options = _options(
        recorded,
        timeout=timeout,
        reply_timeout=reply_timeout,
        idle_timeout=idle_timeout,
        call_timeout=call_timeout,
        max_turns=max_turns,
        decide_timeout=decide_timeout,
        conversation_id=conversation_id if with_ids else None,
    )
    replayer = _Replayer(recorded, times, domain=domain, recheck=recheck, options=options)
    recorded_turns, replayed_turns = _Turns(), _Turns()
    divergences: list[Divergence] = []
    for number, start in enumerate(starts, start=1):
        end = starts[number] if number < len(starts) else len(recorded)
        began = replayer.position
        replayer.recording.call_start, replayer.recording.call_end = start, end
        raised = replayer.make(recorded[start])
        if replayer.core.state.in_call and replayer.position < end:  # it died: what recovering it records
            replayer.recover(replayer.core)
        theirs = [compared(event) for event in recorded[start:end]]
        ours = [compared(event) for event in replayer.core.log.events[began:]]
        for side, error in ((theirs, _recorded_raise(recorded[start:end])), (ours, raised)):
            if error is not None:
                side.append({"type": "raised", "error": error})
        divergences.extend(_compare(number, recorded_turns.number(theirs), replayed_turns.number(ours)))
        if replayer.position != end:  # re-align on the recording, so one divergence does not cascade
            replayer.core = replayer._core(_entries(recorded[:end], times[:end]))
    turns = sum(1 for event in replayer.core.log.events if event.type == "sent")
    return ReplayReport(
        calls=len(starts),
        turns=turns,
        divergences=tuple(divergences),
        not_run=tuple(replayer.not_run),
        rechecked=recheck,
    )


def _options(recorded: Sequence[Event], **given: Any) -> dict[str, Any]:
    """The conversation's options as the replayer reads them: ``given``, and whether the person could be asked
    (a recording whose asks were all left unasked was made with a person who had no ``answer``)."""
    asks = [event for event in recorded if event.type == "ask"]
    return {**given, "answers": not asks or any(getattr(event, "asked", True) for event in asks)}


class _Substituted(_Replayer):
    """Makes the recorded call that holds the message at ``position`` with another reply to that message, and
    answers what the core then asks without the recording's person or agent: the turn stops where it would wait
    for either (see :func:`handle_reply`)."""

    def __init__(self, recorded: Sequence[Event], times: Sequence[float], position: int, reply: str, **rest: Any):
        super().__init__(recorded, times, **rest)
        self.at_message = position
        self.substitute = reply
        self.handling = False
        self.unjudged: list[tuple[str, Any]] = []
        self.judged_now: list[tuple[str, Any]] = []

    def _answer(self, effect: Effect) -> Any:
        if not self.handling:
            return super()._answer(effect)
        if isinstance(effect, (GetContext, Send, AwaitStream, AwaitPerson)):
            raise _Died  # the next message, or a wait for the person: the reply's turn went as far as it can
        if isinstance(effect, LookUp):
            return self._declared(effect.action)
        if isinstance(effect, Review):
            return self._review_again(effect)
        if isinstance(effect, Consult):
            return Answer(Defer())  # the card (or question) is shown and waits: the next proposal is handled
        if isinstance(effect, RunAction):
            return self._recorded_run(effect)
        return None

    def _reply(self, effect: Send) -> object:
        if self.position == self.at_message + 1 and not self.handling:
            self.handling = True
            return Replied(self.substitute)
        return super()._reply(effect)

    def _declared(self, action: str) -> ActionSpec | None:
        """The action's spec: the domain's, else as the recording showed a suggestion of that action (an action
        the recording never showed counts as one that waits for the person)."""
        if self.domain is not None:
            actions = getattr(self.domain, "actions", None)
            declared = actions.get(action) if isinstance(actions, Mapping) else None
            return None if declared is None else as_action_spec(declared)
        shown = next(
            (e for e in self.recording.events if isinstance(e, SuggestionEvent) and e.action == action), None
        )
        if shown is None:
            return ActionSpec(mutates=True)
        return ActionSpec(mutates=shown.mutates, destructive=shown.destructive, handoff=shown.handoff)

    def _review_again(self, effect: Review) -> Reviewed:
        """The recording's verdict on the same action and payload, wherever in the conversation it judged it, so
        a reply identical to the recorded one is judged as the recording was; else the domain's, asked now (named
        in :attr:`judged_now`); else, with no domain, the payload passes, as a domain without ``validate`` lets
        it (named in :attr:`unjudged`: the evaluation counts it unverified)."""
        recorded = self._recorded_verdict(effect.action, effect.payload)
        if recorded is not None:
            return recorded
        if self.domain is not None:
            self.judged_now.append((effect.action, effect.payload))
            return self._domain_review(effect)
        self.unjudged.append((effect.action, effect.payload))
        return Reviewed(None, effect.action)

    def _recorded_verdict(self, action: str, payload: Any) -> Reviewed | None:
        """How the recording judged a proposal of ``action`` with ``payload``: shown (with its preview), or
        refused when it was proposed (with the domain's issue); ``None`` when it never judged it."""
        events = self.recording.events
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

    def _recorded_run(self, effect: RunAction) -> object:
        """What the recording's run of the same action and payload came to; else not run."""
        for event in self.recording.events:
            if isinstance(event, ActionStartedEvent) and (event.action, event.payload) == (
                effect.action,
                effect.payload,
            ):
                ended = self.recording.about(event.suggestion_id, "outcome")
                if isinstance(ended, OutcomeEvent):
                    if ended.status == "failed":
                        error = ActionError(ended.error or "", code=ended.code, field=ended.field, hint=ended.hint)
                        return RunFailed(error)
                    return Ran(ended.result)
        return RunFailed(ActionError("not run: the recording holds no result for it", code=NOT_RUN))


class HandledReply(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`handle_reply` came to: the log, the proposals (action and payload) that passed only because
    neither the recording nor a domain could judge them, and those the domain judged now, the recording having
    never judged them."""

    entries: tuple[LogEntry, ...]
    unjudged: tuple[tuple[str, Any], ...] = ()
    judged_now: tuple[tuple[str, Any], ...] = ()


def handle_reply(
    entries: Sequence[LogEntry],
    position: int,
    reply: str,
    *,
    domain: Any = None,
    max_turns: int = 8,
    decide_timeout: float | None = None,
) -> HandledReply:
    """The log the core writes when the agent answers the message logged at ``entries[position]`` (a ``sent``
    event) with ``reply`` instead of what the recording holds: the recording up to that message, then what
    handling ``reply`` records, with nothing run and no one asked.

    The recorded call is made again up to that message, answered from the recording as :func:`replay` does.
    Handling ``reply`` then goes as far as it can without the recording's agent or person:

    - each proposal is looked up by ``domain``'s ``actions`` when it is given, else as the recording showed the
      action; its payload is judged as the recording judged the same action and payload (shown, or refused), so a
      reply identical to the recorded one comes to what it came to; a payload the recording never judged is
      reviewed by ``domain``'s ``validate`` and ``preview`` (named in :attr:`HandledReply.judged_now`), or
      without a domain passes (named in :attr:`HandledReply.unjudged`);
    - a card or a question is shown and left waiting;
    - a read-only action answers with the recording's result for the same payload (else it fails
      ``not-run-in-replay``);
    - the turn stops before the next message, or a wait.

    ``ValueError`` when ``entries[position]`` is not a message sent.
    """
    recorded = [entry.event for entry in entries]
    if not 0 <= position < len(recorded) or not isinstance(recorded[position], SentEvent):
        raise ValueError(f"handle_reply: entry {position + 1} is not a message sent to the agent")
    times = [entry.time for entry in entries]
    starts = _starts(recorded)
    start = max(index for index in starts if index <= position)
    end = next((index for index in starts if index > position), len(recorded))
    options = _options(
        recorded,
        timeout=None,
        reply_timeout=None,
        idle_timeout=None,
        call_timeout=None,
        max_turns=max_turns,
        decide_timeout=decide_timeout,
        conversation_id=None,
    )
    handler = _Substituted(recorded, times, position, reply, domain=domain, recheck=False, options=options)
    handler.core = handler._core(_entries(recorded[:start], times[:start]))
    handler.recording.call_start, handler.recording.call_end = start, end
    handler.make(recorded[start])
    return HandledReply(
        entries=tuple(handler.core.log.entries()),
        unjudged=tuple(handler.unjudged),
        judged_now=tuple(handler.judged_now),
    )


def _entries(events: Sequence[Event], times: Sequence[float]) -> list[LogEntry]:
    return [
        LogEntry(seq=seq, time=when, event=event)
        for seq, (event, when) in enumerate(zip(events, times, strict=True), 1)
    ]
