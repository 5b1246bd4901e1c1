"""Where calls and turns begin in a log: what replay and evaluation cut a recorded conversation into.

A call (``say``, ``decide``, ``answer``, ``resume``, ``end``, and ``claim``, ``release``, ``assign`` of a waiting
card) begins at a ``said`` or a ``resumed`` event, or at an ``ended``, ``claimed``, ``released`` or ``assigned``
between calls (:func:`call_starts`); a turn begins at each message sent (:func:`answered_turns`,
those that got a reply, with the extent of the call's part that follows them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ..runtime.events import (
    AssignedEvent,
    ClaimedEvent,
    EndedEvent,
    Event,
    FinishedEvent,
    LogEntry,
    ReleasedEvent,
    ReplyEvent,
    ResumedEvent,
    SaidEvent,
    SentEvent,
)

__all__ = ["AnsweredTurn", "TurnNumbers", "answered_turns", "call_starts", "handed_back"]


def call_starts(events: Sequence[Event]) -> list[int]:
    """Where each call begins: at a ``said`` or a ``resumed`` event (a ``say`` that takes up an awaiting
    conversation logs ``resumed`` first and its ``said`` after closing what waited), and at an ``ended`` (an
    ``end()``), a ``claimed``, a ``released`` or an ``assigned`` between calls. ``ValueError`` when the log does
    not begin with a call."""
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
        elif isinstance(event, (EndedEvent, ClaimedEvent, ReleasedEvent, AssignedEvent)) and not in_call:
            starts.append(index)
        elif isinstance(event, FinishedEvent) and not waiting_for_words:
            in_call = False
        elif not starts:
            raise ValueError(f"the log begins with a {event.type!r} event, not with a call")
    return starts


def handed_back(entries: Sequence[LogEntry], shown_seq: int, ended_seq: int) -> bool:
    """Whether the outcome of the suggestion shown at ``shown_seq`` and ended at ``ended_seq`` went back to the
    agent that proposed it through a door (:mod:`dial_runtime.mcp_server`): it ended in the call that proposed it,
    whose answer it was, or someone spoke after it ended (the door's receipt, an empty ``said``, or the next
    words). Otherwise it ended in a later call (a decision, an expiry) that the agent outside has not heard of."""
    in_its_call = True
    for entry in entries:
        if entry.seq <= shown_seq:
            continue
        event = entry.event
        if isinstance(event, FinishedEvent) and entry.seq < ended_seq:
            in_its_call = False
        elif isinstance(event, SaidEvent) and entry.seq > ended_seq:
            return True
    return in_its_call


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


class TurnNumbers:
    """Numbers events (compared forms, fed a call at a time) by turn the way the runtime does: a ``say`` starts
    at turn 0, each message sent starts the turn it names, and a ``decide``, ``answer`` or ``resume`` goes on in
    the turn whose reply is being handled."""

    def __init__(self) -> None:
        self.turn = 0
        self.ended = False
        self.sent = 0  # the messages numbered so far

    def pass_over(self, events: Iterable[Event]) -> None:
        """Go on past ``events`` (one call's) without numbering them (a replay does so for a call it found the
        same as its recording)."""
        for event in events:
            if isinstance(event, SaidEvent):
                if not self.ended:
                    self.turn = 0
            elif isinstance(event, SentEvent):
                self.turn = event.turn
                self.sent += 1
            elif isinstance(event, EndedEvent):
                self.ended = True

    def number(self, events: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
        """``events`` (one call's), by the turn each belongs to."""
        turns: dict[int, list[dict[str, Any]]] = {}
        for event in events:
            kind = event["type"]
            if kind == "said" and not self.ended:
                self.turn = 0
            elif kind == "sent":
                self.turn = event["turn"]
                self.sent += 1
            elif kind == "ended":
                self.ended = True
            turns.setdefault(self.turn, []).append(event)
        return turns
