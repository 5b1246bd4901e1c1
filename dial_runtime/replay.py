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

Nothing in a replay depends on the clock: the recorded agent and person either answer at once or never, so a
deadline passes exactly where it passed in the recording, however fast the clock runs.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, NoReturn, cast

import anyio
import attrs
import msgspec

from .runtime.conversation import Conversation
from .runtime.core import OVERTAKEN, PROCESS_STOPPED
from .runtime.events import (
    AnsweredEvent,
    DecidedEvent,
    DeferredEvent,
    Event,
    InterruptedEvent,
    LogEntry,
    ReplyEvent,
    ResumedEvent,
    SaidEvent,
    SendFailedEvent,
    event_to_dict,
)
from .runtime.records import Accept, Ask, Decision, Defer, Dismiss, Edit, Say, Suggestion

#: The ``decide_timeout`` a replay uses when the recording has an expired decision and none is given.
EXPIRE_TIMEOUT = 0.01

#: The reason the runtime records for a call a dead process left open; such a call raised nothing.
_PROCESS_STOPPED = PROCESS_STOPPED

#: What can follow a message to the agent.
_AGENT_ANSWERS = frozenset({"reply", "no-reply", "send-failed"})

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


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a replay came to: the calls made, the turns run (messages the recorded agent answered or not), and
    every divergence from the recording, in order."""

    calls: int
    turns: int
    divergences: tuple[Divergence, ...] = ()

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
    """Answers each message the way the recording's agent answered the same message of the call."""

    def __init__(self, events: Sequence[Event]) -> None:
        self._answers: deque[Event | None] = deque()
        for index, event in enumerate(events):
            if event.type == "sent":
                following = (later for later in events[index + 1 :] if later.type in (*_AGENT_ANSWERS, "sent"))
                answer = next(following, None)
                self._answers.append(answer if answer is not None and answer.type != "sent" else None)

    async def send(self, message: str) -> str:
        answer = self._answers.popleft() if self._answers else None
        if isinstance(answer, ReplyEvent):
            return answer.text
        if isinstance(answer, SendFailedEvent):
            raise _send_error(answer.error)
        if answer is None:
            raise LookupError("the recording holds no answer to this message")
        return await _forever()


class _RecordedStreamingAgent(_RecordedAgent):
    """The recorded agent of a call whose replies were streamed: each reply arrives whole, as one chunk (the
    runtime handles speech acts in document order however the text is cut)."""

    async def stream(self, message: str) -> AsyncIterator[str]:
        yield await self.send(message)


class _RecordedPerson:
    """Makes the recorded decisions and answers, in order, for the suggestion or ask each was made for.

    A suggestion the recording never put to the person is dismissed (nothing unrecorded runs); an ask it never put
    gets an empty answer (the question stands).
    """

    def __init__(self, events: Iterable[Event], crash_point: Callable[[], None]) -> None:
        self._crash_point = crash_point
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
        self._crash_point()
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
        self._crash_point()
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


class _Domain:
    """The domain, unchanged but for the hook that stops an action the recording's process died in."""

    def __init__(self, domain: Any, crash_point: Callable[[], None]) -> None:
        self._domain = domain
        self._crash_point = crash_point

    def __getattr__(self, name: str) -> Any:
        return getattr(self._domain, name)

    async def run(self, action: str, payload: Any) -> Any:
        self._crash_point()
        result = self._domain.run(action, payload)
        return await result if inspect.isawaitable(result) else result


class _Replay:
    """A replay in progress: the conversation the recorded calls are made on, and the call being made."""

    def __init__(self, domain: Any, options: dict[str, Any]) -> None:
        self._domain = _Domain(domain, self._crash_point)
        self._options = options
        self._call = _Call(kind="", events=(), made_from=0)
        self._start = 0
        self.conversation = self._rebuilt(())

    def _rebuilt(self, log: Iterable[LogEntry]) -> Conversation:
        """A conversation folded from ``log``; one that a dead process left in a call recovers as it would (with
        the hook set only afterwards: recovering is not a point where the process can die)."""
        conversation = Conversation(
            agent=_RecordedAgent(()),
            domain=self._domain,
            human=_RecordedPerson((), self._crash_point),
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
        if not died_here or events[:done] != tuple(entry.event for entry in log[self._start :]):
            return
        recovered = self._rebuilt(log)
        if not rest:
            raise _Crash(recovered, log)
        if tuple(entry.event for entry in recovered.log[len(log) :]) == rest:
            raise _Crash(recovered, recovered.log)

    async def make(self, call: _Call) -> tuple[list[Event], str | None]:
        """Make the recorded call; return the events it logged and what it raised (as the runtime words errors)."""
        conversation = self.conversation
        self._call, self._start = call, len(conversation.log)
        streamed = any(event.type == "reply-started" for event in call.events)
        conversation.agent = (_RecordedStreamingAgent if streamed else _RecordedAgent)(call.events)
        conversation.human = _RecordedPerson(call.events[call.made_from :], self._crash_point)
        given = call.input
        raised = None
        try:
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
        except _Crash as crash:
            self.conversation = crash.recovered
            return [entry.event for entry in crash.logged[self._start :]], None
        except Exception as error:
            raised = _describe(error)
        return [entry.event for entry in self.conversation.log[self._start :]], raised


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


def _event(item: LogEntry | Event) -> Event:
    return item.event if isinstance(item, LogEntry) else item


async def replay(
    events: Iterable[LogEntry | Event],
    *,
    domain: Any,
    max_turns: int = 8,
    timeout: float | None = 90.0,
    decide_timeout: float | None = None,
) -> ReplayReport:
    """Make the recorded calls again with the current runtime and ``domain``, and compare what they log.

    The options are the :class:`Conversation`'s and should be the recording's (a ``no-reply`` names its
    timeout). When the recording has an expired decision and ``decide_timeout`` is ``None``,
    :data:`EXPIRE_TIMEOUT` is used. ``ValueError`` for a log that does not begin with a call, or a recording with
    a ``no-reply`` replayed without a timeout.
    """
    recorded = [_event(item) for item in events]
    calls = _calls(recorded)
    if timeout is None and any(event.type == "no-reply" for event in recorded):
        raise ValueError("replay: the recording has a no-reply; replay it with the timeout it was recorded with")
    if decide_timeout is None and any(isinstance(e, DecidedEvent) and e.decision == "expire" for e in recorded):
        decide_timeout = EXPIRE_TIMEOUT
    run = _Replay(domain, {"timeout": timeout, "max_turns": max_turns, "decide_timeout": decide_timeout})
    recorded_turns, replayed_turns = _Turns(), _Turns()
    divergences: list[Divergence] = []
    for number, call in enumerate(calls, start=1):
        events, raised = await run.make(call)
        theirs = [event_to_dict(event) for event in call.events]
        ours = [event_to_dict(event) for event in events]
        for side, error in ((theirs, call.raised()), (ours, raised)):
            if error is not None:
                side.append({"type": "raised", "error": error})
        divergences.extend(_compare(number, recorded_turns.number(theirs), replayed_turns.number(ours)))
    turns = sum(1 for entry in run.conversation.log if entry.event.type == "sent")
    return ReplayReport(calls=len(calls), turns=turns, divergences=tuple(divergences))
