"""A reply that could not be used, sent again byte for byte, stops the call instead of bringing the same refusal
turn after turn up to ``max_turns``: the log says so (``reply-repeated``), the person sees why, the call returns
``no-reply``, and the refusal stays owed for the next call, which tells the agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, policy_human, replay
from dial_runtime.errors import LogError, TokenLimitReached
from dial_runtime.runtime.core import REPEATED
from dial_runtime.runtime.events import (
    FinishedEvent,
    HandledEvent,
    InformEvent,
    LogEntry,
    ReplyEvent,
    ReplyRefusedEvent,
    ReplyRepeatedEvent,
    SaidEvent,
    SentEvent,
)
from dial_runtime.stores.jsonl import check_log
from dial_runtime.views.person import Notice, project

from ..fakes import Agent, Notes, StreamingAgent, envelope, suggest

pytestmark = pytest.mark.anyio

BAD = "<dial><<</dial>"
WORSE = "<dial><<<</dial>"
TWO = envelope("<dial-inform>One.</dial-inform>") + envelope("<dial-inform>Two.</dial-inform>")
OK = envelope("<dial-inform>Noted.</dial-inform>")
NOTE = envelope(suggest("add-note", '{"text": "milk"}'))
CUT = "<dial><dial-inform>and on and on"  # a streamed reply the token limit cuts (see :class:`Cutting`)


class Cutting(Agent):
    """Streams each reply whole in one chunk, and says the model reached its token limit after :data:`CUT`."""

    async def stream(self, message: str) -> AsyncIterator[str]:
        reply = await self.send(message)
        yield reply
        if reply == CUT:
            raise TokenLimitReached("the model reached its token limit")


AGENTS: dict[str, type[Agent]] = {"whole": Agent, "streamed": StreamingAgent, "cut": Cutting}


def conversation_for(agent: Agent, **options: Any) -> Conversation:
    return Conversation(agent=agent, domain=Notes(), human=policy_human("accept"), **options)


def types_of(conversation: Conversation) -> list[str]:
    return [entry.event.type for entry in conversation.log]


HOW = ("whole", "streamed")

CASES = [
    # what the agent replies, how, the call's status and turns, whether it stopped on a repeat
    ("the same refused reply twice", [BAD, BAD, OK], HOW, "no-reply", 2, True),
    ("the same reply of two envelopes twice", [TWO, TWO, OK], ("whole",), "no-reply", 2, True),
    ("the same reply cut twice", [CUT, CUT, OK], ("cut",), "no-reply", 2, True),
    ("different refused replies", [BAD, WORSE, OK], HOW, "idle", 3, False),
    ("the same reply that was fine", [NOTE, NOTE, OK], HOW, "idle", 3, False),
    ("a refused reply again after a fine one", [BAD, NOTE, BAD, OK], HOW, "idle", 4, False),
]


@pytest.mark.parametrize(
    ("replies", "how", "status", "turns", "stopped"),
    [
        pytest.param(replies, how, status, turns, stopped, id=f"{name}, {how}")
        for name, replies, hows, status, turns, stopped in CASES
        for how in hows
    ],
)
async def test_a_call_stops_only_on_an_unusable_reply_sent_again(
    replies: list[str], how: str, status: str, turns: int, stopped: bool
) -> None:
    conversation = conversation_for(AGENTS[how](replies))
    with anyio.fail_after(5):
        result = await conversation.say("go")
    assert (result.status, result.turns) == (status, turns)
    assert types_of(conversation).count("reply-repeated") == int(stopped)
    notices = [item.text for item in project(conversation.log).items if isinstance(item, Notice)]
    assert ("the agent repeated a reply that could not be used" in notices) == stopped
    assert replay(conversation.log).ok


@pytest.mark.parametrize("how", HOW)
async def test_the_refusal_stays_owed_and_the_next_call_tells_the_agent(how: str) -> None:
    agent = AGENTS[how]([BAD, BAD, OK])
    conversation = conversation_for(agent)
    with anyio.fail_after(5):
        assert (await conversation.say("go")).status == "no-reply"
    kinds = types_of(conversation)
    assert kinds[-4:] == ["reply-refused", "reply-repeated", "handled", "finished"]
    refusal = conversation.log[-4].event
    assert isinstance(refusal, ReplyRefusedEvent) and refusal.reason.endswith(REPEATED)
    with anyio.fail_after(5):
        result = await conversation.say("")
    assert (result.status, result.turns) == ("idle", 1)
    assert 'of="reply-2"' in agent.sent[-1] and "send another reply" in agent.sent[-1]
    assert replay(conversation.log).ok


async def test_each_call_starts_afresh() -> None:
    conversation = conversation_for(Agent([WORSE, BAD, BAD, OK]), max_turns=2)
    with anyio.fail_after(5):
        assert (await conversation.say("go")).status == "turn-limit"
        result = await conversation.say("again")
    assert (result.status, result.turns) == ("idle", 2)  # its first reply repeats none of this call's
    assert "reply-repeated" not in types_of(conversation)


def _entries(*events: Any) -> list[LogEntry]:
    return [LogEntry(seq=seq, time=0.0, event=event) for seq, event in enumerate(events, 1)]


def _refused_turn(turn: int, text: str) -> list[Any]:
    return [
        SentEvent(turn=turn, message="go"),
        ReplyEvent(turn=turn, text=text),
        ReplyRefusedEvent(turn=turn, reply_id=f"reply-{turn}", reason="not usable", element=-1),
    ]


def test_a_log_written_before_reply_repeated_still_reads() -> None:
    check_log(
        _entries(
            SaidEvent(text="go"),
            *_refused_turn(1, BAD),
            HandledEvent(turn=1),
            *_refused_turn(2, BAD),
            HandledEvent(turn=2),
            SentEvent(turn=3, message="go"),
            ReplyEvent(turn=3, text=OK),
            InformEvent(text="Noted.", act="inform", element=0),
            HandledEvent(turn=3),
            FinishedEvent(status="idle", turns=3),
        )
    )


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(_refused_turn(2, WORSE), id="another reply"),
        pytest.param(_refused_turn(2, BAD)[:2], id="not refused"),
    ],
)
def test_a_log_claiming_a_repeat_that_is_not_one_is_refused(second: list[Any]) -> None:
    log = _entries(SaidEvent(text="go"), *_refused_turn(1, BAD), HandledEvent(turn=1), *second)
    repeated = LogEntry(seq=len(log) + 1, time=0.0, event=ReplyRepeatedEvent(turn=2))
    with pytest.raises(LogError, match="reply-repeated"):
        check_log([*log, repeated])
