"""Where calls and turns begin in a log: what replay and evaluation cut a recorded conversation into.

A call (``say``, ``decide``, ``answer``, ``resume``, ``end``) begins at a ``said`` or a ``resumed`` event, or at
an ``ended`` between calls (:func:`call_starts`); a turn begins at each message sent (:func:`answered_turns`,
those that got a reply, with the extent of the call's part that follows them).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..runtime.events import (
    EndedEvent,
    Event,
    FinishedEvent,
    LogEntry,
    ReplyEvent,
    ResumedEvent,
    SaidEvent,
    SentEvent,
)

__all__ = ["AnsweredTurn", "answered_turns", "call_starts"]


def call_starts(events: Sequence[Event]) -> list[int]:
    """Where each call begins: at a ``said`` or a ``resumed`` event (a ``say`` that takes up an awaiting
    conversation logs ``resumed`` first and its ``said`` after closing what waited), and at an ``ended`` between
    calls (an ``end()``). ``ValueError`` when the log does not begin with a call."""
    starts: list[int] = []
    in_call = False
    waiting_for_words = False
    for index, event in enumerate(events):
        if isinstance(event, ResumedEvent):
            starts.append(index)
            in_call, waiting_for_words = True, event.call == "say"
        elif isinstance(event, SaidEvent):
            if not waiting_for_words:
                starts.append(index)
            in_call, waiting_for_words = True, False
        elif isinstance(event, EndedEvent) and not in_call:
            starts.append(index)
        elif isinstance(event, FinishedEvent) and not waiting_for_words:
            in_call = False
        elif not starts:
            raise ValueError(f"the log begins with a {event.type!r} event, not with a call")
    return starts


class AnsweredTurn(msgspec.Struct, frozen=True):
    """A message sent that got a reply: its position in the log (``index``), the position after the recorded
    turn's last entry, where its call ends (``end``), the turn's number, the message and the reply."""

    index: int
    end: int
    turn: int
    message: str
    reply: str


def answered_turns(entries: Sequence[LogEntry]) -> list[AnsweredTurn]:
    """Every turn of the log whose message got a reply, in order."""
    sent = [index for index, entry in enumerate(entries) if isinstance(entry.event, SentEvent)]
    found = []
    for number, index in enumerate(sent):
        end = sent[number + 1] if number + 1 < len(sent) else len(entries)
        finished = next((at for at in range(index, end) if isinstance(entries[at].event, FinishedEvent)), None)
        end = end if finished is None else finished + 1  # the call's end: what follows is the person's next call
        message = entries[index].event
        assert isinstance(message, SentEvent)
        reply = next((entry.event for entry in entries[index:end] if isinstance(entry.event, ReplyEvent)), None)
        if reply is not None:
            found.append(AnsweredTurn(index, end, message.turn, message.message, reply.text))
    return found
