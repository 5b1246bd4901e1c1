"""Replay a recorded conversation against the current runtime and a domain, and report where it diverges.

A recording is a conversation's log. Each call it holds (``say``, ``decide``, ``answer``, ``resume``, ``end``) is
made again on a fresh :class:`~dial_runtime.runtime.conversation.Conversation`; nothing is sent to any agent. A
recorded agent answers each message with what the recording holds next for it (the reply, streamed when it was
streamed; a wait that outlasts the deadline for a ``no-reply``; the recorded error for a ``send-failed``), and a
recorded person makes the recorded decisions and answers, each for the suggestion or ask it was made for. The
events every call produces are compared, turn by turn, with the recorded ones (without ``seq`` and ``time``), so a
change in the runtime or the domain shows up as a list of :class:`Divergence`.

Where the recording's process died (the log shows what :meth:`Conversation.open` recovered, or a call that never
finished), the replay stops the call at the same point and recovers from the log as it stood, as ``open`` does;
an action the dead process was running is not run again.

A replay is dry unless ``run_actions=True``: no action of the domain runs. Where the runtime starts an action,
the recorded outcome of that action (the same suggestion, action and payload) stands in for it: its result, or
its error raised again as an :class:`~dial_runtime.runtime.records.ActionError` with the recorded code, field and
hint. An action the recording never ran is not run either: it fails with code ``not-run-in-replay``, and the
report lists it under ``not_run``, the places where the new code would have run something the recording did not.
Since nothing ran, the domain's own state stays where it was: the ``context`` its messages carry is therefore
the recorded one (each message is compared with its recorded context in place). ``validate`` and ``preview`` are
called as usual: they are meant to have no effects.

Nothing in a replay depends on the clock: the recorded agent and person either answer at once or never, so a
deadline passes exactly where it passed in the recording, however fast the clock runs.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, NoReturn, cast

import anyio
import anyio.lowlevel
import attrs
import msgspec

from .runtime.conversation import Conversation
from .runtime.core import CUT, IDLE_DEADLINE, OVERTAKEN, PROCESS_STOPPED, REPLY_DEADLINE
from .runtime.events import (
    ActionStartedEvent,
    AnsweredEvent,
    DecidedEvent,
    DeferredEvent,
    Event,
    InterruptedEvent,
    LogEntry,
    OutcomeEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyRefusedEvent,
    ResumedEvent,
    SaidEvent,
    SendFailedEvent,
    SentEvent,
    event_to_dict,
)
from .runtime.records import Accept, ActionError, Ask, Decision, Defer, Dismiss, Edit, Say, Suggestion

#: The ``decide_timeout`` a replay uses when the recording has an expired decision and none is given.
EXPIRE_TIMEOUT = 0.01

#: How many times a replayed stream cut off by a cancellation lets the call's own task run before it gives up
#: waiting for the call to reach the point where the recording's was cancelled.
_CATCH_UP = 64

#: The reason the runtime records for a call a dead process left open; such a call raised nothing.
_PROCESS_STOPPED = PROCESS_STOPPED

#: What can follow a message to the agent.
_AGENT_ANSWERS = frozenset({"reply", "no-reply", "send-failed"})

#: The code of the outcome of an action a dry replay did not run, because the recording never ran it.
NOT_RUN = "not-run-in-replay"

#: Where a dry replay's message holds the domain's context: the recorded message's context takes its place.
_CONTEXT = "\ue000the recorded context\ue000"

#: The events a call cancelled from outside records after the point where it was cancelled.
_CANCELLING = frozenset({"reply-progress", "proposed", "outcome", "answered", "interrupted", "finished"})

#: How the runtime words a call that was cancelled; a replay words one so too, and reads the older form (the
#: exception's text, which names a cancel scope or a task that existed only in that process) as it.
_CANCELLED = "the call was cancelled"

#: The events recovering from a dead process records.
_RECOVERY = frozenset({"outcome", "deferred", "handled", "interrupted", "finished"})


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
    """An action a dry replay would have run where the recording ran nothing like it: the 1-based ``call``, the
    suggestion, the action and its payload."""

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
    divergence from the recording, in order, and (a dry replay) the actions it did not run."""

    calls: int
    turns: int
    divergences: tuple[Divergence, ...] = ()
    not_run: tuple[NotRun, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the replay produced exactly the recorded events."""
        return not self.divergences

    def __str__(self) -> str:
        head = f"replayed {self.calls} call(s), {self.turns} turn(s)"
        if self.ok:
            return f"{head}: identical to the recording"
        lines = [f"{head}: {len(self.divergences)} divergence(s)"]
        lines.extend(f"  {divergence}" for divergence in self.divergences)
        lines.extend(f"  {skipped}" for skipped in self.not_run)
        return "\n".join(lines)


class _RecordedSendError(Exception):
    """A recorded failed send, raised again; :func:`_send_error` names its class like the original's, because
    the runtime logs a failure as ``"TypeName: message"``."""


def _send_error(error: str) -> _RecordedSendError:
    name, colon, message = error.partition(": ")
    if not name.isidentifier():
        return _RecordedSendError(error)
    cls = cast("type[_RecordedSendError]", type(name, (_RecordedSendError,), {"__module__": __name__}))
    return cls(message if colon else "")


def _describe(error: BaseException) -> str:
    """An exception as the runtime logs it (``"TypeName: message"``, or the bare name)."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def _forever() -> NoReturn:
    """Wait until cancelled: a recorded silence, which the deadline around the wait ends as it did then."""
    await anyio.sleep_forever()
    raise AssertionError("sleep_forever returned")


class _RecordedAgent:
    """Answers each message the way the recording's agent answered the same message of the call; ``stop_point``
    is awaited first (where the recording's call was cancelled, it cancels this one)."""

    def __init__(self, events: Sequence[Event], stop_point: Callable[[], Awaitable[None]]) -> None:
        self._stop_point = stop_point
        self._answers: deque[Event | None] = deque()
        self._partial: deque[str | None] = deque()
        self._past_deadline: deque[bool] = deque()
        for index, event in enumerate(events):
            if event.type == "sent":
                later = list(itertools.takewhile(lambda e: e.type != "sent", events[index + 1 :]))
                answer = next((e for e in later if e.type in _AGENT_ANSWERS), None)
                self._answers.append(answer)
                cut = answer is None and any(e.type == "reply-started" for e in later)
                progress = "".join(e.text for e in later if isinstance(e, ReplyProgressEvent))
                self._partial.append(progress if cut else None)
                self._past_deadline.append(_deadline_cut(later) is not None)

    async def send(self, message: str) -> str:
        await self._stop_point()
        answer = self._answers.popleft() if self._answers else None
        if self._partial:
            self._partial.popleft()
            self._past_deadline.popleft()
        if isinstance(answer, ReplyEvent):
            return answer.text
        if isinstance(answer, SendFailedEvent):
            raise _send_error(answer.error)
        if answer is None:
            raise LookupError("the recording holds no answer to this message")
        return await _forever()


class _RecordedStreamingAgent(_RecordedAgent):
    """The recorded agent of a call whose replies were streamed: each reply arrives whole, as one chunk (the
    runtime handles speech acts in document order however the text is cut); a reply whose stream was cut off
    (the call was cancelled while it arrived) arrives as far as the log holds it, and the call is cancelled there,
    once it has handled what arrived as the recording's had (or, where the replay no longer matches the
    recording, the stream breaks off)."""

    async def stream(self, message: str) -> AsyncIterator[str]:
        partial = self._partial[0] if self._partial else None
        if self._past_deadline and self._past_deadline[0]:
            yield await self.send(message)  # what arrived before the deadline, then nothing: it passes again
            await _forever()
        if partial is None:
            yield await self.send(message)
            return
        self._partial.popleft()
        self._past_deadline.popleft()
        self._answers.popleft()
        yield partial
        for _ in range(_CATCH_UP):  # the call handles what arrived (prose shown, elements handled) in its task
            await self._stop_point()
            await anyio.lowlevel.checkpoint()
        raise LookupError("the recording holds no more of this reply")


def _deadline_cut(events: Iterable[Event]) -> str | None:
    """Why a recorded streamed reply among ``events`` was cut by a deadline, in the log's words, if one was."""
    return next((e.reason for e in events if isinstance(e, ReplyRefusedEvent) and e.reason.startswith(CUT)), None)


class _RecordedPerson:
    """Makes the recorded decisions and answers, in order, for the suggestion or ask each was made for.

    A suggestion the recording never put to the person is dismissed (nothing unrecorded runs); an ask it never put
    gets an empty answer (the question stands).
    """

    def __init__(self, events: Iterable[Event], stop_point: Callable[[], Awaitable[None]]) -> None:
        self._stop_point = stop_point
        self._decisions: dict[str, deque[DecidedEvent | DeferredEvent]] = {}
        self._answers: dict[str, deque[AnsweredEvent | DeferredEvent]] = {}
        for event in events:
            if isinstance(event, DecidedEvent):
                self._decisions.setdefault(event.suggestion_id, deque()).append(event)
            elif isinstance(event, AnsweredEvent):
                self._answers.setdefault(event.ask_id, deque()).append(event)
            elif isinstance(event, DeferredEvent):
                queues: dict[str, Any] = self._decisions if event.kind == "suggestion" else self._answers
                queues.setdefault(event.subject_id, deque()).append(event)

    async def decide(self, suggestion: Suggestion) -> Decision | Defer:
        await self._stop_point()
        queue = self._decisions.get(suggestion.id)
        if not queue:
            return Dismiss()
        event = queue.popleft()
        if isinstance(event, DeferredEvent):
            return Defer()
        if event.decision == "expire":
            return await _forever()
        return _decision(event)

    async def answer(self, ask: Ask) -> str | Defer:
        await self._stop_point()
        queue = self._answers.get(ask.id)
        if not queue:
            return ""
        event = queue.popleft()
        if isinstance(event, DeferredEvent):
            return Defer()
        if event.expired and ask.timeout is not None:
            return await _forever()
        return event.text


def _decision(event: DecidedEvent) -> Decision:
    """The decision a ``decided`` event records (not ``expire``: that one is a silence)."""
    if event.decision == "accept":
        return Accept()
    if event.decision == "dismiss":
        return Dismiss()
    if event.decision == "edit":
        return Edit(event.payload)
    if event.decision == "say":
        return Say(event.text or "")
    raise ValueError(f"replay: unknown decision {event.decision!r} on {event.suggestion_id!r}")


@attrs.frozen
class _Call:
    """One recorded call: its kind, its events, and the index of the first event its person made (after the
    call's own input: the ``said`` words, or the decision or answer given to ``decide`` or ``answer``)."""

    kind: str
    events: tuple[Event, ...]
    made_from: int

    @property
    def input(self) -> Event | None:
        return self.events[self.made_from - 1] if self.made_from else None

    @property
    def finished(self) -> bool:
        """Whether the call got to its end (else its process died, and nothing recovered it yet)."""
        return any(event.type == "finished" for event in self.events)

    def raised(self) -> str | None:
        """What the recorded call raised: a failed send's error, or why it was interrupted."""
        for event in self.events:
            if isinstance(event, SendFailedEvent):
                return event.error
            if isinstance(event, InterruptedEvent) and event.reason not in (_PROCESS_STOPPED, OVERTAKEN):
                return event.reason
        return None


def _calls(events: Sequence[Event]) -> list[_Call]:
    """Split a log into its calls: each begins at a ``said`` or a ``resumed`` event (a ``say`` that takes up an
    awaiting conversation logs ``resumed`` first and its ``said`` after closing what waited), and an ``ended``
    between calls is an ``end()``."""
    groups: list[tuple[str, list[Event]]] = []
    for event in events:
        current = groups[-1] if groups else None
        closed = current is None or current[1][-1].type == "finished"
        waiting_for_words = (
            current is not None and current[0] == "say" and not any(e.type == "said" for e in current[1])
        )
        if event.type == "resumed":
            groups.append((event.call if isinstance(event, ResumedEvent) else "", [event]))
        elif event.type == "said" and not waiting_for_words:
            groups.append(("say", [event]))
        elif event.type == "ended" and closed and not waiting_for_words:
            groups.append(("end", [event]))
        elif current is None:
            raise ValueError(f"replay: the log begins with a {event.type!r} event, not with a call")
        else:
            current[1].append(event)
    calls = []
    for kind, group in groups:
        made_from = 0
        if kind == "say":
            made_from = next((index + 1 for index, event in enumerate(group) if event.type == "said"), 0)
        elif kind in ("decide", "answer"):
            made_from = min(2, len(group))
        calls.append(_Call(kind=kind, events=tuple(group), made_from=made_from))
    return calls


class _Crash(BaseException):
    """Where the recording's process died: the call logged ``logged`` (recovery included, when the recording
    holds one) and the replay goes on with ``recovered``, the conversation rebuilt from the log as it stood. A
    ``BaseException``, so that no ``except Exception`` of the runtime's turns it into a failed action or send."""

    def __init__(self, recovered: Conversation, logged: tuple[LogEntry, ...]) -> None:
        super().__init__()
        self.recovered = recovered
        self.logged = logged


def _crash_in(error: BaseException) -> _Crash | None:
    """The :class:`_Crash` that ``error`` is, or holds (a task group groups what its tasks raise)."""
    if isinstance(error, _Crash):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = _crash_in(inner)
        if found is not None:
            return found
    return None


class _Domain:
    """The domain, unchanged but for the hook that stops an action the recording's process died in, and (a dry
    replay) ``stand_in``, which answers for the action instead of the domain."""

    def __init__(
        self, domain: Any, stop_point: Callable[[], Awaitable[None]], stand_in: Callable[[str, Any], Any] | None
    ) -> None:
        self._domain = domain
        self._stop_point = stop_point
        self._stand_in = stand_in

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._domain, name)
        if name == "context" and self._stand_in is not None and callable(found):
            return lambda: _CONTEXT
        return found

    async def run(self, action: str, payload: Any) -> Any:
        await self._stop_point()
        if self._stand_in is not None:
            return self._stand_in(action, payload)
        result = self._domain.run(action, payload)
        return await result if inspect.isawaitable(result) else result


class _RecordedActions:
    """What the recording's actions came to, by suggestion, in order: each ``action-started`` and the outcome
    that followed it (``None`` where the process died first)."""

    def __init__(self, events: Sequence[Event]) -> None:
        self._runs: dict[str, deque[tuple[ActionStartedEvent, OutcomeEvent | None]]] = {}
        for index, event in enumerate(events):
            if isinstance(event, ActionStartedEvent):
                outcome = next(
                    (
                        e
                        for e in events[index + 1 :]
                        if isinstance(e, OutcomeEvent) and e.id == event.suggestion_id
                    ),
                    None,
                )
                self._runs.setdefault(event.suggestion_id, deque()).append((event, outcome))

    def take(self, started: ActionStartedEvent) -> OutcomeEvent | None:
        """The recorded outcome of the same run (suggestion, action, payload), used up; ``None`` when there is
        none."""
        runs = self._runs.get(started.suggestion_id)
        if not runs:
            return None
        recorded, outcome = runs[0]
        if (recorded.action, recorded.payload) != (started.action, started.payload) or outcome is None:
            return None
        runs.popleft()
        return outcome


class _Replay:
    """A replay in progress: the conversation the recorded calls are made on, and the call being made."""

    def __init__(
        self, domain: Any, options: dict[str, Any], recorded: Sequence[Event], *, run_actions: bool
    ) -> None:
        self._domain = _Domain(domain, self._stop_point, None if run_actions else self._stand_in)
        self._scope = anyio.CancelScope()
        self._options = options
        self._call = _Call(kind="", events=(), made_from=0)
        self._start = 0
        self._actions = _RecordedActions(recorded)
        self.calls = 0
        self.not_run: list[NotRun] = []
        self.conversation = self._rebuilt(())

    def _stand_in(self, action: str, payload: Any) -> Any:
        """What the recording's run of this action came to, instead of running it: its result, or its error."""
        started = self.conversation.log[-1].event  # the runtime logs the start just before it runs the action
        outcome = self._actions.take(started) if isinstance(started, ActionStartedEvent) else None
        if outcome is None:
            suggestion_id = started.suggestion_id if isinstance(started, ActionStartedEvent) else "?"
            self.not_run.append(
                NotRun(call=self.calls, suggestion_id=suggestion_id, action=action, payload=payload)
            )
            raise ActionError("not run: a dry replay runs no action the recording did not run", code=NOT_RUN)
        if outcome.status == "failed":
            raise ActionError(outcome.error or "", code=outcome.code, field=outcome.field, hint=outcome.hint)
        return outcome.result

    def _rebuilt(self, log: Iterable[LogEntry]) -> Conversation:
        """A conversation folded from ``log``; one that a dead process left in a call recovers as it would (with
        the hook set only afterwards: recovering is not a point where the process can die)."""
        conversation = Conversation(
            agent=_RecordedAgent((), self._stop_point),
            domain=self._domain,
            human=_RecordedPerson((), self._stop_point),
            log=log,
            **self._options,
        )
        conversation.recover()
        conversation.on_event = lambda event: self._crash_point()
        return conversation

    def _crash_point(self) -> None:
        """Stop the call as a crash would where the recording's process died: the call so far matches the
        recording, and what the recording holds next is exactly what recovering from this log records, or,
        in a call that never finished, nothing."""
        log = self.conversation.log
        events, done = self._call.events, len(log) - self._start
        rest = events[done:]
        died_here = all(event.type in _RECOVERY for event in rest) if rest else not self._call.finished
        so_far = [entry.event for entry in log[self._start :]]
        if not died_here or done > len(events) or not all(map(_same, events[:done], so_far)):
            return
        recovered = self._rebuilt(log)
        if not rest:
            raise _Crash(recovered, log)
        if tuple(entry.event for entry in recovered.log[len(log) :]) == rest:
            raise _Crash(recovered, recovered.log)

    async def _stop_point(self) -> None:
        """Where the call waits (for the agent, the person, an action): stop it as a crash would (see
        :meth:`_crash_point`), or cancel it here if the recording's call was cancelled here, that is when the
        call so far matches the recording and all it holds next is what a cancellation records."""
        self._crash_point()
        events, log = self._call.events, self.conversation.log
        done = len(log) - self._start
        rest = events[done:]
        cancelled = next(
            (
                event.reason
                for event in rest
                if isinstance(event, InterruptedEvent) and event.reason not in (_PROCESS_STOPPED, OVERTAKEN)
            ),
            None,
        )
        if (
            cancelled is not None
            and all(event.type in _CANCELLING for event in rest)
            and all(map(_same, events[:done], [entry.event for entry in log[self._start :]]))
        ):
            self.conversation.cancelling(_stop_reason(cancelled))  # in the recording's words (a surface's own)
            self._scope.cancel()
            await anyio.lowlevel.checkpoint()

    async def make(self, call: _Call) -> tuple[list[Event], str | None]:
        """Make the recorded call; return the events it logged and what it raised (as the runtime words errors)."""
        conversation = self.conversation
        self._call, self._start = call, len(conversation.log)
        self.calls += 1
        streamed = any(event.type == "reply-started" for event in call.events)
        conversation.agent = (_RecordedStreamingAgent if streamed else _RecordedAgent)(
            call.events, self._stop_point
        )
        conversation.human = _RecordedPerson(call.events[call.made_from :], self._stop_point)
        # A reply the recording cut by a deadline is cut by the same one: the replayed stream holds what arrived,
        # then nothing, so only the deadline that passed then may pass now.
        cut, options = _deadline_cut(call.events) or "", self._options
        conversation.reply_timeout = None if cut.startswith(CUT + IDLE_DEADLINE) else options["reply_timeout"]
        conversation.idle_timeout = None if cut.startswith(CUT + REPLY_DEADLINE) else options["idle_timeout"]
        given = call.input
        raised = None
        self._scope = anyio.CancelScope()
        try:
            with self._scope:
                await self._make(call, given)
        except BaseException as error:
            crash = _crash_in(error)
            if crash is not None:
                self.conversation = crash.recovered
                return [entry.event for entry in crash.logged[self._start :]], None
            if not isinstance(error, Exception):
                raise
            raised = _describe(error)
        events = [entry.event for entry in self.conversation.log[self._start :]]
        if self._scope.cancelled_caught:  # as the runtime words it: the interruption the replayed call recorded
            raised = next((e.reason for e in reversed(events) if isinstance(e, InterruptedEvent)), _CANCELLED)
        return events, raised

    async def _make(self, call: _Call, given: Event | None) -> None:
        """Make the call ``call`` records, with its input ``given``."""
        conversation = self.conversation
        if call.kind == "say":
            await conversation.say(given.text if isinstance(given, SaidEvent) else "")
        elif call.kind == "decide" and isinstance(given, DecidedEvent):
            await conversation.decide(given.suggestion_id, _decision(given), by=given.by)
        elif call.kind == "decide" and isinstance(given, DeferredEvent):
            await conversation.decide(given.subject_id, Defer())
        elif call.kind == "answer" and isinstance(given, AnsweredEvent):
            await conversation.answer(given.ask_id, given.text, by=given.by)
        elif call.kind == "resume":
            await conversation.resume()
        elif call.kind == "end":
            conversation.end()
        else:
            raise ValueError(f"replay: cannot make a {call.kind!r} call of {[e.type for e in call.events]}")


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


def _streamed_reply(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A streamed turn's events without its ``reply``, and the ``reply``: a streamed reply is recorded when its
    last chunk is in, which may fall anywhere among the events its elements cause. ``reply-progress`` is left
    out: how much of a reply had arrived when the person was asked depends on timing, not on the code."""
    if not any(event["type"] == "reply-started" for event in events):
        return events, []
    kept = [e for e in events if e["type"] not in ("reply", "reply-progress")]
    return kept, [e for e in events if e["type"] == "reply"]


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


def _with_context(replayed: str, recorded: str) -> str:
    """A dry replay's message with the recorded context in place of :data:`_CONTEXT`: the recorded message when
    the two agree around it (the context may have been empty, and left out with its separator), else the message
    with a visible placeholder, so that the difference shows."""
    if _CONTEXT not in replayed:
        return replayed
    without = {replayed.replace(f"\n\n{_CONTEXT}", ""), replayed.replace(f"{_CONTEXT}\n\n", "")}
    before, _, after = replayed.partition(_CONTEXT)
    around = len(recorded) >= len(before) + len(after) and recorded.startswith(before) and recorded.endswith(after)
    if around or recorded in without or (replayed == _CONTEXT and not recorded):
        return recorded
    return replayed.replace(_CONTEXT, "<the domain's context>")


def _same(recorded: Event, replayed: Event) -> bool:
    """Whether a replayed event is the recorded one (a message compared with its recorded context in place, a
    cancellation with a cancellation)."""
    if isinstance(recorded, SentEvent) and isinstance(replayed, SentEvent) and recorded.turn == replayed.turn:
        return _with_context(replayed.message, recorded.message) == recorded.message
    return recorded == replayed or _plain(event_to_dict(recorded)) == _plain(event_to_dict(replayed))


def _stop_reason(reason: str) -> str:
    """A reason the runtime recorded, with a cancellation's process-specific text dropped."""
    kind = reason.partition(":")[0]
    return _CANCELLED if kind in ("Cancelled", "CancelledError") else reason


def _plain(event: dict[str, Any]) -> dict[str, Any]:
    """An event as compared: the reason of an interruption, and the error of an action it cut short, in
    :func:`_stop_reason`'s words; a message without its id (the replayed conversation has none: the id follows
    from the conversation's id and the log)."""
    if event["type"] == "sent":
        return {key: value for key, value in event.items() if key != "message_id"}
    if event["type"] == "interrupted":
        return {**event, "reason": _stop_reason(event["reason"])}
    if (
        event["type"] in ("outcome", "raised")
        and event.get("error")
        and event.get("code", "interrupted") == "interrupted"
    ):
        return {**event, "error": _stop_reason(event["error"])}
    return event


def _fill_contexts(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    """Put each recorded message's context into the replayed message of the same turn (a dry replay's)."""
    recorded = {event["turn"]: event["message"] for event in theirs if event["type"] == "sent"}
    for event in ours:
        if event["type"] == "sent" and _CONTEXT in event["message"]:
            event["message"] = _with_context(event["message"], recorded.get(event["turn"], ""))


def _event(item: LogEntry | Event) -> Event:
    return item.event if isinstance(item, LogEntry) else item


async def replay(
    events: Iterable[LogEntry | Event],
    *,
    domain: Any,
    max_turns: int = 8,
    timeout: float | None = 90.0,
    decide_timeout: float | None = None,
    reply_timeout: float | None = 300.0,
    idle_timeout: float | None = 30.0,
    run_actions: bool = False,
) -> ReplayReport:
    """Make the recorded calls again with the current runtime and ``domain``, and compare what they log.

    Dry unless ``run_actions``: the recorded results and errors stand in for the domain's actions (see the
    module's description).

    The options are the :class:`Conversation`'s and should be the recording's (a ``no-reply`` names its
    timeout, a streamed reply cut by a deadline the deadline's length: the replay waits it out, as a no-reply
    its timeout). When the recording has an expired decision and ``decide_timeout`` is ``None``,
    :data:`EXPIRE_TIMEOUT` is used. ``ValueError`` for a log that does not begin with a call, or a recording with
    a ``no-reply`` replayed without a timeout.
    """
    recorded = [_event(item) for item in events]
    calls = _calls(recorded)
    if timeout is None and any(event.type == "no-reply" for event in recorded):
        raise ValueError("replay: the recording has a no-reply; replay it with the timeout it was recorded with")
    if decide_timeout is None and any(isinstance(e, DecidedEvent) and e.decision == "expire" for e in recorded):
        decide_timeout = EXPIRE_TIMEOUT
    options = {
        "timeout": timeout,
        "reply_timeout": reply_timeout,
        "idle_timeout": idle_timeout,
        "max_turns": max_turns,
        "decide_timeout": decide_timeout,
    }
    run = _Replay(domain, options, recorded, run_actions=run_actions)
    recorded_turns, replayed_turns = _Turns(), _Turns()
    divergences: list[Divergence] = []
    for number, call in enumerate(calls, start=1):
        events, raised = await run.make(call)
        theirs = [event_to_dict(event) for event in call.events]
        ours = [event_to_dict(event) for event in events]
        _fill_contexts(ours, theirs)
        for side, error in ((theirs, call.raised()), (ours, raised)):
            if error is not None:
                side.append({"type": "raised", "error": error})
        theirs, ours = [_plain(event) for event in theirs], [_plain(event) for event in ours]
        divergences.extend(_compare(number, recorded_turns.number(theirs), replayed_turns.number(ours)))
    turns = sum(1 for entry in run.conversation.log if entry.event.type == "sent")
    return ReplayReport(calls=len(calls), turns=turns, divergences=tuple(divergences), not_run=tuple(run.not_run))
