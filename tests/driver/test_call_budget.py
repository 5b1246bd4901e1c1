"""A call's budget of time for the agent (``call_timeout``): replies cut by their deadline turn after turn stop
when it passes, as a deadline stops a reply; what is owed stays owed, and the next message tells the agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, Suggestion, policy_human, replay
from dial_runtime.runtime.events import NoReplyEvent, ReplyCutEvent

from ..fakes import Agent, Notes, envelope, hang, make, suggest

pytestmark = pytest.mark.anyio

OK = envelope("<dial-inform>Noted.</dial-inform>")
DEADLINES = {"timeout": 1.0, "reply_timeout": 0.1, "idle_timeout": None}


class Endless(Agent):
    """Streams an inform that never ends, a chunk every hundredth of a second, each reply its own (the same
    unusable reply again would stop the call on its own); then, once its endless replies are used, replies as
    :class:`Agent` does."""

    def __init__(self, endless: int, replies: list[str]) -> None:
        super().__init__(replies)
        self.endless = endless

    async def stream(self, message: str) -> AsyncIterator[str]:
        if self.endless == 0:
            yield await self.send(message)
            return
        self.endless -= 1
        self.sent.append(message)
        yield f"<dial><dial-inform>{self.endless} and"
        while True:
            await anyio.sleep(0.01)
            yield " on"


def _causes(conversation: Conversation) -> list[str]:
    return [entry.event.cause for entry in conversation.log if isinstance(entry.event, ReplyCutEvent)]


async def test_replies_cut_turn_after_turn_stop_when_the_call_has_had_its_time() -> None:
    agent = Endless(8, [OK])
    conversation = Conversation(
        agent=agent, domain=Notes(), human=policy_human("accept"), call_timeout=0.25, **DEADLINES
    )
    with anyio.fail_after(5):
        result = await conversation.say("write on")
    assert (result.status, result.turns) == ("no-reply", 3)
    assert _causes(conversation) == ["reply-deadline", "reply-deadline", "call-deadline"]
    assert len(agent.sent) == 3
    assert replay(conversation.log).ok
    agent.endless = 0
    with anyio.fail_after(5):
        result = await conversation.say("")  # what was owed goes with the next call: why the reply was cut
    assert result.status == "idle"
    assert "the call's deadline passed (0.25 s of waiting for the agent in this call)" in agent.sent[-1]


async def test_without_a_budget_the_turn_limit_stops_them() -> None:
    conversation = Conversation(
        agent=Endless(8, []),
        domain=Notes(),
        human=policy_human("accept"),
        call_timeout=None,
        max_turns=3,
        **DEADLINES,
    )
    with anyio.fail_after(5):
        result = await conversation.say("write on")
    assert (result.status, result.turns) == ("turn-limit", 3)
    assert _causes(conversation) == ["reply-deadline"] * 3


async def test_a_reply_that_never_comes_stops_the_call_and_leaves_what_is_owed() -> None:
    conversation, agent, _ = make(
        [envelope(suggest("add-note", '{"text": "buy milk"}')), hang, OK], call_timeout=0.2, timeout=90.0
    )
    with anyio.fail_after(5):
        result = await conversation.say("add a note: buy milk")
    assert (result.status, result.turns) == ("no-reply", 2)
    (no_reply,) = [entry.event for entry in conversation.log if isinstance(entry.event, NoReplyEvent)]
    assert no_reply.error == "The agent didn't reply before the call's deadline passed (0.2 s of waiting for it)"
    assert [(outcome.id, outcome.status) for outcome in conversation.owed] == [("sg-1", "done")]
    assert replay(conversation.log).ok
    with anyio.fail_after(5):
        await conversation.say("")
    assert agent.sent[-1] == agent.sent[-2]  # the same outcomes, sent again


class SlowPerson:
    """Takes longer to decide than the call's budget: the person's time is not the agent's."""

    async def decide(self, suggestion: Suggestion) -> Any:
        await anyio.sleep(0.2)
        return {"accept": True}


async def test_the_person_s_time_is_not_taken_from_the_budget() -> None:
    conversation, _, _ = make(
        [envelope(suggest("add-note", '{"text": "buy milk"}')), OK], SlowPerson(), call_timeout=0.1
    )
    with anyio.fail_after(5):
        result = await conversation.say("add a note: buy milk")
    assert (result.status, result.turns) == ("idle", 2)
