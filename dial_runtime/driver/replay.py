"""Replay a recorded conversation through the conversation core, and report where it diverges.

A recording is a conversation's log, and the log holds every answer its core was given: the replay makes each
recorded call (``say``, ``decide``, ``answer``, ``expire``, ``resume``, ``end``) again on a fresh
:class:`~dial_runtime.runtime.core.ConversationCore`, with no event loop and no clock, and answers every effect
the core yields with the recorded answer to it (:class:`~dial_runtime.views.answers.RecordedAnswers`). What the
core records is compared, call by call and turn by turn, with what the recording holds, so a change in the
runtime shows up as a list of :class:`Divergence`. A log written by an earlier version is read through the one
upgrade step first (:func:`~dial_runtime.runtime.upgrade.upgraded`).

A replay is dry, and nothing in it runs: the recording answers for the domain too (whether an action exists and
how it is declared, each ``validate`` verdict, each preview, each result), so an untouched log replays
identical, whatever state the domain is in now. ``recheck=True`` asks the domain instead of the log for
``actions``, ``validate``, ``preview`` and its ``approval_rules`` (never ``run``): a verdict that depends on the
domain's state may then differ, and the divergence says the domain answered otherwise. An action the core would
start where the recording ran nothing like it is not run either: it fails with code ``not-run-in-replay``, and the
report lists it under ``not_run``.

Where the recording's process died, the log holds no answer past that point, and the next call begins with what
recovering from it records (:meth:`ConversationCore.recover`): the replayed call is closed there, and recovered
as ``Conversation.open`` does.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Generator, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import msgspec

from ..errors import ActionError, Interruption, NotWaiting, RecordedError
from ..runtime.core import ConversationCore, reason
from ..runtime.effects import (
    Answer,
    AwaitPerson,
    AwaitStream,
    CheckPrecondition,
    Consult,
    ConsultRules,
    Effect,
    EndStream,
    Expired,
    GetContext,
    LookUp,
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
from ..runtime.events import Event, LogEntry
from ..runtime.flow import FlowRules
from ..runtime.records import ActionSpec, Defer, TurnResult, as_action_spec, as_issue
from ..runtime.upgrade import upgraded
from ..views.answers import (
    Cancelled,
    RecordedAnswers,
    comparable,
    recorded_raise,
    same_events,
    split_streamed_reply,
)
from ..views.calls import TurnNumbers, call_starts
from ..views.person import not_waiting
from .conversation import premise_issue, rule_on

__all__ = ["NOT_RUN", "Divergence", "HandledReply", "NotRun", "ReplayReport", "handle_reply", "replay"]


#: The code of the outcome of an action a replay did not run, because the recording never ran it.
NOT_RUN = "not-run-in-replay"


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


class _Died(Exception):
    """The recording's process died here: the replayed call is closed without another event."""


class _Replayer:
    """Makes the recorded calls on a core and answers its effects from the recording (or, for what ``recheck``
    names, from the domain)."""

    def __init__(
        self,
        entries: Sequence[LogEntry],
        *,
        domain: Any,
        recheck: bool,
        max_turns: int,
        conversation_id: str | None = None,
        decide_timeout: float | None = None,
    ) -> None:
        self.recorded = [entry.event for entry in entries]
        self.times = [entry.time for entry in entries]
        self.answers = RecordedAnswers(self.recorded)
        self.domain = domain
        self.recheck = recheck
        self.max_turns = max_turns
        self.conversation_id = conversation_id
        self.person_answers = self.answers.person_could_answer()  # read once: every core made here is told it
        self.decide_timeout = decide_timeout  # for what the recording holds no spec of (another reply's proposals)
        self.not_run: list[NotRun] = []
        self.calls = 0
        self.core = self._core(())
        self._waiting: Any = None  # the person's answer a Thinking deferred to the AwaitPerson that follows
        self._pieces: list[Streamed] = []  # the rest of a streamed reply, as it arrived

    def _core(self, entries: Iterable[LogEntry]) -> ConversationCore:
        rules = getattr(self.domain, "flow_rules", None)
        return ConversationCore(
            entries,
            max_turns=self.max_turns,
            decide_timeout=self.decide_timeout,
            answers=self.person_answers,
            flow=rules if isinstance(rules, FlowRules) else None,
            conversation_id=self.conversation_id,
            clock=self._time,
        )

    def _time(self) -> float:
        position = len(self.core.log)
        return self.times[position] if position < len(self.times) else (self.times[-1] if self.times else 0.0)

    @property
    def position(self) -> int:
        return len(self.core.log)

    def realign(self, end: int) -> None:
        """Go on from the recording's first ``end`` entries, so one divergence does not cascade."""
        times, recorded = self.times, self.recorded
        self.core = self._core(
            LogEntry(seq=seq, time=times[seq - 1], event=recorded[seq - 1]) for seq in range(1, end + 1)
        )

    # --- making a call -----------------------------------------------------------------------------------------

    def make(self, start: int) -> str | None:
        """Make the call recorded from ``start``; what it raised, as the runtime words it, or ``None``."""
        self.calls += 1
        self.recover(self.core)  # a call a dead process left open is closed by the next, as Conversation does
        made = self.answers.call(start)
        core = self.core
        try:
            if made.kind == "say":
                call: Generator[Effect, Any, TurnResult | None] | None = core.say(made.words, made.by, made.roles)
            elif made.kind == "decide":
                assert made.decision is not None
                call = core.decide(
                    made.subject, made.decision, made.by, via=made.via, roles=made.roles, link=made.link
                )
            elif made.kind == "answer":
                call = core.answer(made.subject, made.words, made.by)
            elif made.kind == "expire":
                call = core.expire_due()
            elif made.kind == "resume":
                call = core.resume()
            elif made.kind == "claim":
                core.claim(made.subject, made.by, made.roles, made.until)
                call = None
            elif made.kind == "release":
                core.release(made.subject, made.by)
                call = None
            elif made.kind == "assign":
                core.assign(
                    made.subject,
                    made.by,
                    made.roles,
                    person=made.person,
                    person_roles=made.person_roles,
                    role=made.role,
                )
                call = None
            else:
                core.end(made.words)
                call = None
        except NotWaiting as refused:  # a decision on what no longer waits: told as Conversation tells it
            return reason(not_waiting(core.log.entries(), refused))
        except Exception as refused:  # the call is refused at once
            return reason(refused)
        return None if call is None else self._drive(call)

    def _drive(self, call: Generator[Effect, Any, TurnResult | None]) -> str | None:
        """Drive ``call`` to its end, answering each effect; what it raised, in the runtime's words."""
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
            return self.answers.context(self.position)
        if isinstance(effect, Send):
            return self._reply()
        if isinstance(effect, AwaitStream):
            return self._more()
        if isinstance(effect, LookUp):
            return self._spec(effect)
        if isinstance(effect, Review):
            return self._review(effect)
        if isinstance(effect, ConsultRules):
            return (
                rule_on(self.domain, self.conversation_id, effect)
                if self.recheck
                else self.answers.ruled(effect.suggestion_id)
            )
        if isinstance(effect, CheckPrecondition):
            if self.recheck:
                return premise_issue(self.domain, effect)
            return self.answers.lapsed(effect.suggestion_id, self.position)
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
        """Raise what stopped the recording's call at this point, if it stopped here (see :meth:`_stop`)."""
        stop = self._stop()
        if stop is not None:
            raise stop

    def _stop(self) -> BaseException | None:
        """What stopped the recording's call at the current point, if it stopped here: a cancellation, thrown in
        with the words it was logged in, or the process's death."""
        position = self.position
        stream = self.core.stream
        progress = "" if stream is None else stream.parser.text[stream.logged :]
        cancelled = self.answers.cancelled(position, progress)
        if cancelled is not None:
            return Interruption(cancelled, _Cancelled())
        if self._dies_here(position):
            return _Died()
        return None

    def _dies_here(self, position: int) -> bool:
        """Whether the recording's process died at this point: its call holds no more and never finished, or
        what follows is exactly what recovering from the log so far records (a death logs nothing itself)."""
        answers = self.answers
        rest = self.recorded[position : answers.call_end]
        if not rest:
            return position >= answers.call_end and not answers.finished()
        if not answers.only_recovery(position):
            return False
        probe = self._core(self.core.log.entries())
        before = len(probe.log)
        self.recover(probe)
        return list(probe.log.events[before:]) == list(rest[: len(probe.log) - before])

    def _reply(self) -> object:
        """What the recording's agent answered to the message just sent."""
        self._stopped_here()
        answer = self.answers.reply(self.position)
        if answer is None:
            if self.answers.finished():  # the recording's call ended before this message: nothing answered it
                raise RecordedError("LookupError: the recording holds no answer to this message")
            raise _Died
        if isinstance(answer, RecordedError):
            raise answer
        if isinstance(answer, Cancelled):
            raise Interruption(answer.reason, _Cancelled())
        if isinstance(answer, tuple):
            self._pieces = list(answer[1:])
            return answer[0] if answer else Streamed()
        return answer

    def _more(self) -> Streamed:
        """The next piece of the streamed reply, or what stopped its call here."""
        if self._pieces:
            return self._pieces.pop(0)
        self._stopped_here()
        raise _Died  # the recording holds no more of it, and its call did not stop here: it went no further

    def _spec(self, effect: LookUp) -> ActionSpec | None:
        if not self.recheck:
            return self.answers.spec(effect.suggestion_id)
        actions = getattr(self.domain, "actions", None)
        declared = actions.get(effect.action) if isinstance(actions, Mapping) else None
        return None if declared is None else as_action_spec(declared)

    def _review(self, effect: Review) -> Reviewed:
        if self.recheck:
            return self._domain_review(effect)
        opened = self.core.state.open_suggestions.get(effect.suggestion_id)
        return self.answers.verdict(
            effect.suggestion_id, proposed=opened is not None and opened.state == "proposed"
        )

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
        position = self.position
        answer = self.answers.person(effect.question)
        if isinstance(answer, Expired) or self.answers.waited_at(position) or self._stop():
            self._waiting = answer  # the call waited for it (a stop at that wait is raised there)
            return Thinking()
        return answer

    def recover(self, core: ConversationCore) -> None:
        """Close what a dead process left open in ``core``, the domain's ``reconcile`` answered from the
        recording: nothing is asked of the domain."""
        recovery = core.recover()
        found: object = None
        while True:
            try:
                effect = recovery.send(found)
            except StopIteration:
                return
            assert isinstance(effect, Reconcile)
            found = self.answers.reconciled(effect.suggestion_id) or Unreconciled(
                "the recording's recovery reconciled no run of it"
            )

    def _run(self, effect: RunAction) -> object:
        """What the recording's run of this action came to (never run here)."""
        self._stopped_here()
        ident = getattr(self.core.log.events[-1], "suggestion_id", "")  # the run's start was logged last
        ran = self.answers.run(ident, effect.action, effect.payload)
        if ran is None:
            self.not_run.append(
                NotRun(call=self.calls, suggestion_id=ident, action=effect.action, payload=effect.payload)
            )
            return RunFailed(ActionError("not run: the recording holds no result for it", code=NOT_RUN))
        return ran


def _compare(
    call: int, recorded: dict[int, list[dict[str, Any]]], replayed: dict[int, list[dict[str, Any]]]
) -> list[Divergence]:
    """The divergences of one call, turn by turn, aligning the two sides so one extra or missing event shows as
    that event alone (a streamed reply's text is compared on its own: its place among the events varies)."""
    found = []
    for turn in sorted({*recorded, *replayed}):
        theirs, their_reply = split_streamed_reply(recorded.get(turn, []))
        ours, our_reply = split_streamed_reply(replayed.get(turn, []))
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


#: The options a replay no longer needs: the log records what they gave (each deadline's length), so the
#: recording's own values are used. Accepted, with a warning, until the next release.
_RECORDED_OPTIONS = ("timeout", "decide_timeout", "reply_timeout", "idle_timeout", "call_timeout")


def replay(
    entries: Iterable[LogEntry | Event],
    *,
    domain: Any = None,
    recheck: bool = False,
    conversation_id: str | None = None,
    max_turns: int = 8,
    timeout: float | None = None,
    decide_timeout: float | None = None,
    reply_timeout: float | None = None,
    idle_timeout: float | None = None,
    call_timeout: float | None = None,
) -> ReplayReport:
    """Make the recorded calls again through the conversation core and compare what it records with the log.

    The recording answers every effect (see the module's description); ``domain`` gives the flow (a domain with
    one), and with ``recheck`` answers for ``actions``, ``validate`` and ``preview``. ``conversation_id`` names
    each message (without it, messages are compared without their ids); ``max_turns`` bounds each call, as it did
    when recorded. ``timeout``, ``decide_timeout``, ``reply_timeout``, ``idle_timeout`` and ``call_timeout`` are
    deprecated and unused: the log records each deadline. ``ValueError`` for a log that does not begin with a
    call.
    """
    given = dict(
        timeout=timeout,
        decide_timeout=decide_timeout,
        reply_timeout=reply_timeout,
        idle_timeout=idle_timeout,
        call_timeout=call_timeout,
    )
    named = [name for name in _RECORDED_OPTIONS if given[name] is not None]
    if named:
        warnings.warn(
            f"replay: {', '.join(named)} no longer needed: the log records each deadline", DeprecationWarning, 2
        )
    items = list(entries)
    logged = [
        item if isinstance(item, LogEntry) else LogEntry(seq=seq, time=0.0, event=item)
        for seq, item in enumerate(items, 1)
    ]
    rules = getattr(domain, "flow_rules", None)
    logged = upgraded(logged, rules if isinstance(rules, FlowRules) else None)
    recorded = [entry.event for entry in logged]
    starts = _starts(recorded)
    with_ids = conversation_id is not None and any(getattr(e, "message_id", None) for e in recorded)
    with_keys = with_ids and any(getattr(e, "key", None) is not None for e in recorded)
    compared = partial(comparable, with_ids=with_ids, with_keys=with_keys)
    replayer = _Replayer(
        logged,
        domain=domain,
        recheck=recheck,
        max_turns=max_turns,
        conversation_id=conversation_id if with_ids else None,
    )
    recorded_turns, replayed_turns = TurnNumbers(), TurnNumbers()
    divergences: list[Divergence] = []
    for number, start in enumerate(starts, start=1):
        end = starts[number] if number < len(starts) else len(recorded)
        began = replayer.position
        replayer.answers.enter(start, end)
        raised = replayer.make(start)
        if replayer.core.state.in_call and replayer.position < end:  # it died: what recovering it records
            replayer.recover(replayer.core)
        their_events, our_events = recorded[start:end], replayer.core.log.events[began:]
        their_raise = recorded_raise(their_events)
        if raised == their_raise and same_events(their_events, our_events, with_ids=with_ids, with_keys=with_keys):
            recorded_turns.pass_over(their_events)
            replayed_turns.pass_over(our_events)
            continue  # the same call: nothing to look for
        theirs = [compared(event) for event in their_events]
        ours = [compared(event) for event in our_events]
        for side, error in ((theirs, their_raise), (ours, raised)):
            if error is not None:
                side.append({"type": "raised", "error": error})
        divergences.extend(_compare(number, recorded_turns.number(theirs), replayed_turns.number(ours)))
        if replayer.position != end:  # re-align on the recording, so one divergence does not cascade
            replayer.realign(end)
    return ReplayReport(
        calls=len(starts),
        turns=replayed_turns.sent,
        divergences=tuple(divergences),
        not_run=tuple(replayer.not_run),
        rechecked=recheck,
    )


def _starts(events: Sequence[Event]) -> list[int]:
    """Where each call of the recording begins (:func:`~dial_runtime.views.calls.call_starts`)."""
    try:
        return call_starts(events)
    except ValueError as error:
        raise ValueError(f"replay: {error}") from None


class _Substituted(_Replayer):
    """Makes the recorded call that holds the message at ``position`` with another reply to that message, and
    answers what the core then asks without the recording's person or agent: the turn stops where it would wait
    for either (see :func:`handle_reply`)."""

    def __init__(self, entries: Sequence[LogEntry], position: int, reply: str, **rest: Any) -> None:
        super().__init__(entries, **rest)
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
        if isinstance(effect, ConsultRules):  # the domain's rules, asked now; none without a domain
            return rule_on(self.domain, self.conversation_id, effect)
        if isinstance(effect, CheckPrecondition):  # the domain's premise, checked now; holding without a domain
            return premise_issue(self.domain, effect)
        if isinstance(effect, Consult):
            return Answer(Defer())  # the card (or question) is shown and waits: the next proposal is handled
        if isinstance(effect, RunAction):
            ran = self.answers.run_of(effect.action, effect.payload)
            return ran or RunFailed(ActionError("not run: the recording holds no result for it", code=NOT_RUN))
        return None

    def _reply(self) -> object:
        if self.position == self.at_message + 1 and not self.handling:
            self.handling = True
            return Replied(self.substitute)
        return super()._reply()

    def _declared(self, action: str) -> ActionSpec | None:
        """The action's spec: the domain's, else as the recording showed a suggestion of that action."""
        if self.domain is None:
            return self.answers.declared(action)
        actions = getattr(self.domain, "actions", None)
        declared = actions.get(action) if isinstance(actions, Mapping) else None
        return None if declared is None else as_action_spec(declared)

    def _review_again(self, effect: Review) -> Reviewed:
        """The recording's verdict on the same action and payload, wherever in the conversation it judged it, so
        a reply identical to the recorded one is judged as the recording was; else the domain's, asked now (named
        in :attr:`judged_now`); else, with no domain, the payload passes, as a domain without ``validate`` lets
        it (named in :attr:`unjudged`: the evaluation counts it unverified)."""
        recorded = self.answers.verdict_on(effect.action, effect.payload)
        if recorded is not None:
            return recorded
        if self.domain is not None:
            self.judged_now.append((effect.action, effect.payload))
            return self._domain_review(effect)
        self.unjudged.append((effect.action, effect.payload))
        return Reviewed(None, effect.action)


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
    entries = upgraded(entries)
    recorded = [entry.event for entry in entries]
    if not 0 <= position < len(recorded) or not RecordedAnswers(recorded).is_message(position):
        raise ValueError(f"handle_reply: entry {position + 1} is not a message sent to the agent")
    starts = _starts(recorded)
    start = max(index for index in starts if index <= position)
    end = next((index for index in starts if index > position), len(recorded))
    handler = _Substituted(
        entries, position, reply, domain=domain, recheck=False, max_turns=max_turns, decide_timeout=decide_timeout
    )
    handler.realign(start)
    handler.answers.enter(start, end)
    handler.make(start)
    return HandledReply(
        entries=tuple(handler.core.log.entries()),
        unjudged=tuple(handler.unjudged),
        judged_now=tuple(handler.judged_now),
    )
