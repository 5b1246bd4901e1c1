"""Delivery is at least once across a crash: each message has an id derived from the log, the same for a copy sent
again because no reply to it reached the log, and it goes to every agent whose send or stream takes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, open_store, policy_human
from dial_runtime.driver import conversation as driver
from dial_runtime.runtime.events import SentEvent, event_from_dict, event_to_dict

from ..fakes import Notes, envelope, suggest

pytestmark = pytest.mark.anyio

ADD = envelope(suggest("add-note", '{"text":"milk"}'))
OK = "<dial><dial-inform>ok</dial-inform></dial>"


class IdentifiedAgent:
    """Replies in order and records the id each message came with; ``"hang"`` never replies."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.ids: list[str | None] = []

    async def send(self, message: str, *, message_id: str | None = None) -> str:
        self.ids.append(message_id)
        reply = self.replies.pop(0)
        if reply == "hang":
            await anyio.sleep_forever()
        return reply


class IdentifiedStreamingAgent(IdentifiedAgent):
    async def stream(self, message: str, *, message_id: str | None = None) -> AsyncIterator[str]:
        yield await self.send(message, message_id=message_id)


class PlainAgent:
    """An agent whose send takes only the message: it keeps working, and gets no id."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    async def send(self, message: str) -> str:
        return self.replies.pop(0)


def sent_ids(conversation: Conversation) -> list[str | None]:
    return [entry.event.message_id for entry in conversation.log if isinstance(entry.event, SentEvent)]


@pytest.mark.parametrize("agent_class", [IdentifiedAgent, IdentifiedStreamingAgent], ids=["send", "stream"])
async def test_each_message_has_the_id_of_the_reply_it_asks_for(agent_class: type[IdentifiedAgent]) -> None:
    store = open_store("memory:")
    agent = agent_class([ADD, OK, "hang", OK])
    conversation = await Conversation.open(
        store, "order-7", agent=agent, domain=Notes(), human=policy_human("accept"), timeout=0.05
    )
    assert (await conversation.say("add milk")).turns == 2
    assert (await conversation.say("and?")).status == "no-reply"
    await conversation.say("hello again")  # the message that got no reply goes again, with its id
    expected = ["order-7/reply-1", "order-7/reply-2", "order-7/reply-3", "order-7/reply-3"]
    assert sent_ids(conversation) == agent.ids == expected


async def test_an_agent_without_the_keyword_gets_none_and_a_conversation_without_an_id_names_none() -> None:
    store = open_store("memory:")
    plain = await Conversation.open(
        store, "c", agent=PlainAgent([OK]), domain=Notes(), human=policy_human("accept")
    )
    assert (await plain.say("hi")).status == "idle"
    assert sent_ids(plain) == ["c/reply-1"]
    agent = IdentifiedAgent([OK])
    unnamed = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"))
    await unnamed.say("hi")
    assert sent_ids(unnamed) == agent.ids == [None]


async def test_whether_an_agent_takes_ids_is_looked_up_once_per_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    looked_up: list[Any] = []
    real = driver.accepts_message_id

    def counting(method: Any) -> bool:
        looked_up.append(method)
        return real(method)

    monkeypatch.setattr(driver, "accepts_message_id", counting)
    store = open_store("memory:")
    first = IdentifiedAgent([ADD, OK, OK])
    conversation = await Conversation.open(store, "c", agent=first, domain=Notes(), human=policy_human("accept"))
    await conversation.say("add milk")
    await conversation.say("thanks")
    assert len(looked_up) == 2  # send and stream, once, for three messages
    second = IdentifiedAgent([OK])
    conversation.agent = second
    await conversation.say("and you?")
    assert len(looked_up) == 4 and second.ids == ["c/reply-4"]


def test_the_keyword_is_read_from_the_signature() -> None:
    async def keyword(message: str, *, message_id: str | None = None) -> str:
        return message

    def positional(message: str, message_id: str | None = None) -> str:
        return message

    def only_message(message: str) -> str:
        return message

    def options(message: str, **extra: Any) -> str:
        return message

    assert [driver.accepts_message_id(f) for f in (keyword, positional, only_message, options, None, len)] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("event", "data"),
    [
        (SentEvent(turn=1, message="m"), {"type": "sent", "turn": 1, "message": "m"}),
        (
            SentEvent(turn=1, message="m", message_id="c/reply-1"),
            {"type": "sent", "turn": 1, "message": "m", "message_id": "c/reply-1"},
        ),
    ],
    ids=["without-an-id", "with-an-id"],
)
def test_a_message_id_round_trips_and_a_log_without_ids_writes_back_as_it_was(
    event: SentEvent, data: dict[str, Any]
) -> None:
    assert event_to_dict(event) == data
    assert event_from_dict(data) == event
