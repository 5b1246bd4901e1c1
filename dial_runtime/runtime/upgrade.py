"""Logs written by earlier versions, read in the shape this version writes: the one upgrade step.

The log holds every answer the core was given, so a replay feeds them back and compares. Earlier versions
recorded some of those answers only through what the core made of them; this step recovers each from there, once,
for a reader that compares events with those the core records now (:func:`~dial_runtime.replay`):

- an ``outcome`` without its ``trigger`` gets the one its status, the state it ended from and what came just
  before give;
- a ``suggestion`` with a deadline, a reminder or an escalation gets the seconds it was given in (the float that
  gives the recorded time exactly when added to the time it was shown, as the core adds it);
- a ``no-reply`` gets its deadline's ``seconds``, and ``call``, read back from its words;
- a ``sent`` message gets where the domain's context stands in it, found by composing the message again;
- a streamed ``reply`` whose informs were shown while it streamed gets ``handled_at``: where they were complete;
- a streamed reply cut by a deadline before ``reply-cut`` was recorded gets its ``reply-cut``, read from the words
  of the refusal that told the agent.

A log this version wrote passes unchanged. From an entry the fold refuses on, the entries are returned as they
are, for the reader to report.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from typing import Literal

import msgspec

from ..errors import DialSizeError, IllegalTransition
from ..language.records import Acknowledge, Inform
from ..language.stream import StreamParser
from ..statemachines import SUGGESTION
from .core import CUT, ConversationCore, deadline_words, no_reply_words
from .effects import DeadlinePassed, NoReply
from .events import (
    CutCause,
    DecidedEvent,
    Event,
    InformEvent,
    LogEntry,
    NoReplyEvent,
    OutcomeEvent,
    ReplyCutEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyRefusedEvent,
    ReplyStartedEvent,
    SaidEvent,
    SentEvent,
    SuggestionEvent,
)
from .flow import FlowRules
from .state import _recorded_before_triggers, _Refusal

__all__ = ["upgraded"]

#: A number of seconds as the log words it (``f"{seconds:g}"``).
_SECONDS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:e[+-]?\d+)?|inf)(?= ?s\b)")


def upgraded(entries: Sequence[LogEntry], flow: FlowRules | None = None) -> list[LogEntry]:
    """``entries`` in the shape this version writes them (see the module's description); ``flow``: the domain's
    flow the conversation was held with, whose context the messages hold."""
    now = 0.0
    core = ConversationCore(flow=flow, clock=lambda: now)
    found: list[LogEntry] = []
    events = [entry.event for entry in entries]
    words = ""  # the words of the call being made, until the message that carries them
    said_instead = False  # the last events are words said instead of a decision, and the outcomes they ended
    streamed_from: int | None = None  # where the turn's streamed reply began
    for index, entry in enumerate(entries):
        event, now = entry.event, entry.time
        added: list[Event] = [event]
        said_instead = isinstance(event, OutcomeEvent) and said_instead
        if isinstance(event, OutcomeEvent):
            added = [_with_trigger(core, event, said_instead)]
        elif isinstance(event, SuggestionEvent):
            added = [_with_seconds(event, now)]
        elif isinstance(event, NoReplyEvent):
            added = [_with_deadline(event)]
        elif isinstance(event, SentEvent):
            added = [_with_context(core, event, words)]
            words = ""
        elif isinstance(event, SaidEvent):
            words = event.text
        elif isinstance(event, ReplyStartedEvent):
            streamed_from = index
        elif isinstance(event, ReplyEvent) and streamed_from is not None:
            added = [
                _with_handled_at(event, events[streamed_from:index]),
                *_missing_cut(event, events[index + 1 :]),
            ]
            streamed_from = None
        if isinstance(event, DecidedEvent) and event.decision == "say":
            said_instead = True
        try:
            for each in added:
                core.record(each, now)
        except (_Refusal, IllegalTransition):
            return [*found, *_renumbered(entries[index:], len(found))]
        found.extend(LogEntry(seq=len(found) + 1, time=now, event=each) for each in added)
    return found


def _renumbered(entries: Sequence[LogEntry], before: int) -> list[LogEntry]:
    if not entries or entries[0].seq == before + 1:
        return list(entries)
    return [msgspec.structs.replace(entry, seq=before + number) for number, entry in enumerate(entries, 1)]


def _with_trigger(core: ConversationCore, event: OutcomeEvent, said_instead: bool) -> OutcomeEvent:
    """An outcome with the trigger that ended it: words said instead of a decision supersede the other waiting
    suggestions; anything else that ends a waiting one without a decision interrupts it."""
    if event.trigger is not None:
        return event
    opened = core.state.open_suggestions.get(event.id)
    if opened is None or opened.state in SUGGESTION.finals:
        return event
    trigger = _recorded_before_triggers(opened.state, event, core.state.instead)
    if trigger == "supersede" and not said_instead:
        trigger = "interrupt"
    return msgspec.structs.replace(event, trigger=trigger)


def _with_seconds(event: SuggestionEvent, shown: float) -> SuggestionEvent:
    if event.deadline is not None and event.deadline_after is None:
        event = msgspec.structs.replace(event, deadline_after=_seconds_to(shown, event.deadline))
    if event.remind_at is not None and event.remind_after is None:
        event = msgspec.structs.replace(event, remind_after=_seconds_to(shown, event.remind_at))
    if event.escalate_at is not None and event.escalate_after is None:
        event = msgspec.structs.replace(event, escalate_after=_seconds_to(shown, event.escalate_at))
    return event


def _seconds_to(began: float, at: float) -> float:
    """The seconds that give the time ``at`` exactly when added to ``began``, as the core adds them: the float
    nearest their difference, moved a step at a time until the sum is exact."""
    seconds = at - began
    for _ in range(8):
        if began + seconds == at:
            break
        seconds = math.nextafter(seconds, math.inf if began + seconds < at else -math.inf)
    return seconds


def _with_deadline(event: NoReplyEvent) -> NoReplyEvent:
    if event.seconds is not None:
        return event
    for seconds in _numbers(event.error):
        for call in (False, True):
            if no_reply_words(NoReply(seconds, call=call, cause=event.cause)) == event.error:
                return msgspec.structs.replace(event, seconds=seconds, call=call)
    return event


def _numbers(words: str) -> list[float]:
    return [float(number) for number in _SECONDS.findall(words)]


def _with_context(core: ConversationCore, event: SentEvent, words: str) -> SentEvent:
    if event.context is not None:
        return event
    span = core.context_span(event.message, words)
    return event if span is None else msgspec.structs.replace(event, context=span)


def _with_handled_at(reply: ReplyEvent, streamed: Sequence[Event]) -> ReplyEvent:
    """A streamed reply with where the elements shown while it streamed (the ``inform`` events before it) were
    complete; unchanged when it has that already, when none were shown, or when the turn logged its progress
    (the reply then arrived as that says)."""
    if reply.handled_at is not None or any(isinstance(e, ReplyProgressEvent) for e in streamed):
        return reply
    wanted = sum(1 for e in streamed if isinstance(e, InformEvent) and e.element is not None and e.element >= 0)
    if not wanted:
        return reply
    parser, complete, end = StreamParser(), 0, 0
    text = reply.text
    while complete < wanted:
        close = text.find(">", end)
        if close < 0:
            return reply
        piece, end = text[end : close + 1], close + 1
        with contextlib.suppress(DialSizeError):
            complete += sum(1 for element in parser.feed(piece) if isinstance(element, Inform | Acknowledge))
    return msgspec.structs.replace(reply, handled_at=end)


_KINDS: tuple[Literal["reply", "idle", "call"], ...] = ("reply", "idle", "call")
_CAUSES: dict[str, CutCause] = {"reply": "reply-deadline", "idle": "idle-deadline", "call": "call-deadline"}


def _missing_cut(reply: ReplyEvent, after: Sequence[Event]) -> list[Event]:
    """The ``reply-cut`` a log written before it was recorded lacks after a streamed ``reply`` cut by a deadline:
    read from the refusal that told the agent (the turn's next ``reply-refused`` whose words say so)."""
    if after and isinstance(after[0], ReplyCutEvent):
        return []
    for event in after:
        if isinstance(event, SentEvent):
            break
        if isinstance(event, ReplyRefusedEvent) and event.reason.startswith(CUT):
            words = event.reason[len(CUT) :]
            for seconds in _numbers(words):
                for deadline in _KINDS:
                    if words.startswith(deadline_words(DeadlinePassed(deadline=deadline, seconds=seconds))):
                        return [ReplyCutEvent(turn=reply.turn, cause=_CAUSES[deadline], seconds=seconds)]
            return []
    return []
