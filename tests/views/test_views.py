"""The views of the log other than the projection: what the agent saw (each message sent and its reply) and where
the turns a reply answered begin, read from real conversations and from logs cut short."""

from __future__ import annotations

import pytest
import trio

from dial_runtime import Conversation, ScriptedAgent, policy_human
from dial_runtime.demo import NotesDomain
from dial_runtime.runtime.events import (
    FinishedEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyStartedEvent,
    SaidEvent,
    SentEvent,
)
from dial_runtime.views.agent import Exchange, Exchanges, exchanges
from dial_runtime.views.calls import answered_turns, call_starts

SUGGEST = (
    '<dial><dial-suggest action="add-note">Add it<dial-payload>{"text": "milk"}</dial-payload>'
    "</dial-suggest></dial>"
)
DONE = "<dial><dial-inform>Added.</dial-inform></dial>"


def test_a_conversation_s_exchanges_are_its_messages_and_replies_in_order() -> None:
    conversation = Conversation(
        agent=ScriptedAgent([SUGGEST, DONE, DONE]), domain=NotesDomain(), human=policy_human("accept")
    )
    trio.run(conversation.say, "add milk")
    trio.run(conversation.say, "thanks")
    events = [entry.event for entry in conversation.log]
    sent = [event for event in events if isinstance(event, SentEvent)]
    found = exchanges(events)
    assert [each.message for each in found] == [event.message for event in sent]
    assert [each.reply for each in found] == [SUGGEST, DONE, DONE]
    assert all(each.delivered and each.so_far == "" for each in found)
    turns = answered_turns(list(conversation.log))
    assert [(turn.turn, turn.message, turn.reply) for turn in turns] == [
        (each.turn, each.message, reply) for each, reply in zip(sent, [SUGGEST, DONE, DONE], strict=True)
    ]
    # a turn's part of the log runs to the message after it, or to the end of its call
    ends = [turn.end for turn in turns]
    assert ends[0] == turns[1].index
    assert all(isinstance(events[end - 1], FinishedEvent) for end in ends[1:])
    assert call_starts(events) == [index for index, event in enumerate(events) if isinstance(event, SaidEvent)]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        # sent, no reply at all: not delivered
        ([SentEvent(turn=1, message="a")], [Exchange(message="a")]),
        # a streamed reply cut off by the log's end: delivered, with what arrived
        (
            [
                SentEvent(turn=1, message="a"),
                ReplyStartedEvent(turn=1),
                ReplyProgressEvent(turn=1, text="Sure"),
                ReplyProgressEvent(turn=1, text=", "),
            ],
            [Exchange(message="a", delivered=True, so_far="Sure, ")],
        ),
        # a streamed reply that ended: the whole reply, nothing left over
        (
            [
                SentEvent(turn=1, message="a"),
                ReplyStartedEvent(turn=1),
                ReplyProgressEvent(turn=1, text="Su"),
                ReplyEvent(turn=1, text="Sure."),
            ],
            [Exchange(message="a", reply="Sure.", delivered=True)],
        ),
        # the same message sent again after no reply came, then answered
        (
            [SentEvent(turn=1, message="a"), SentEvent(turn=1, message="a"), ReplyEvent(turn=1, text="ok")],
            [Exchange(message="a"), Exchange(message="a", reply="ok", delivered=True)],
        ),
        # a reply with no message before it belongs to no exchange
        ([ReplyEvent(turn=1, text="stray")], []),
    ],
    ids=["unanswered", "cut-off-stream", "ended-stream", "sent-again", "stray-reply"],
)
def test_exchanges_of_logs_cut_short(events: list, expected: list[Exchange]) -> None:
    assert exchanges(events) == expected
    view = Exchanges()  # fed one event at a time, each step is what the whole prefix gives
    for count, event in enumerate(events, start=1):
        view.feed(event)
        assert view.found == exchanges(events[:count])


def test_a_log_that_does_not_begin_with_a_call_is_refused() -> None:
    with pytest.raises(ValueError, match="begins with a 'sent' event, not with a call"):
        call_starts([SentEvent(turn=1, message="a")])
