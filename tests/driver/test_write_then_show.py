"""Write, then show: nothing reaches a surface before the store has it, and no cancellation cuts a write short.

Every store kind, both backends on real clocks, plain and streaming agents, a person who decides at once and one
who defers: when a call returns (or is cancelled), the store holds exactly the conversation's log, and every event
``on_event`` was shown was already acknowledged by the store when it was shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from dial_runtime import Accept, Conversation, Dismiss, LogEntry, open_store, policy_human, scripted_human
from dial_runtime.ports import StorePort

from ..fakes import Agent, Notes, StreamingAgent, envelope, suggest

REPLY = envelope(
    "<dial-inform>Two notes.</dial-inform>",
    suggest("add-note", '{"text":"milk"}', text="Add milk"),
    suggest("add-note", '{"text":"eggs"}', text="Add eggs"),
    prose="Here you go.",
)
pytestmark = pytest.mark.anyio

THANKS = envelope("<dial-acknowledge>Noted.</dial-acknowledge>")


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the stores wait on threads and servers."""
    return real_clocks


class Witness:
    """A store that remembers what it acknowledged, so a test can tell whether an event was shown first."""

    def __init__(self, store: StorePort) -> None:
        self.store = store
        self.acknowledged: list[LogEntry] = []
        self.shown_first: list[str] = []  # the events shown before the store acknowledged them

    async def append(self, conversation_id: str, entries: Sequence[LogEntry], *, expected_seq: int) -> None:
        await self.store.append(conversation_id, entries, expected_seq=expected_seq)
        self.acknowledged.extend(entries)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.fixture
async def store(url: str) -> AsyncIterator[Witness]:
    opened = open_store(url)
    try:
        yield Witness(opened)
    finally:
        await opened.aclose()


def watching(store: Witness, shown: list[Any]) -> Any:
    """An ``on_event`` that notes an event of the log shown before the store acknowledged it (an exception from
    ``on_event`` is logged and goes no further, so the test reads ``store.shown_first`` itself)."""

    def on_event(event: Any) -> None:
        if event.type != "inform-delta" and not any(each.event is event for each in store.acknowledged):
            store.shown_first.append(event.type)
        shown.append(event)

    return on_event


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("person", ["accept", "defer"])
async def test_a_call_returns_with_its_log_stored_and_showed_only_what_was_stored(
    store: Witness, streamed: bool, person: str
) -> None:
    agent = (StreamingAgent if streamed else Agent)([REPLY, THANKS])
    human = policy_human("accept") if person == "accept" else scripted_human(["defer", "defer"])
    shown: list[Any] = []
    conversation = await Conversation.open(
        store, "c-1", agent=agent, domain=Notes(), human=human, on_event=watching(store, shown)
    )
    result = await conversation.say("two notes please")
    assert result.status == ("idle" if person == "accept" else "awaiting")
    assert await store.read("c-1") == list(conversation.log)
    if person == "defer":
        await conversation.decide("sg-1", Accept())
        await conversation.decide("sg-2", Dismiss())
        assert await store.read("c-1") == list(conversation.log)
    assert {event.type for event in shown} >= {"suggestion", "outcome", "inform"}
    assert store.shown_first == []


class Stalling(StreamingAgent):
    """Streams the reply's first ``after`` chunks, then waits for ever (a call is cancelled meanwhile)."""

    def __init__(self, replies: list[str], *, after: int) -> None:
        super().__init__(replies, size=5)
        self.after = after

    async def stream(self, message: str) -> AsyncIterator[str]:
        count = 0
        async with contextlib.aclosing(super().stream(message)) as chunks:
            async for chunk in chunks:
                if count == self.after:
                    await anyio.sleep_forever()
                count += 1
                yield chunk


@pytest.mark.parametrize("after", [0, 3, 12, 30])
async def test_a_cancelled_call_leaves_the_store_holding_its_log(store: Witness, after: int) -> None:
    """The call is cancelled from outside while its stream stalls (a client going away, a Stop button): whatever
    the call recorded up to then, the interruption included, is stored when the cancellation has gone through."""
    shown: list[Any] = []
    conversation = await Conversation.open(
        store,
        "c-2",
        agent=Stalling([REPLY], after=after),
        domain=Notes(),
        human=scripted_human(["defer"] * 3),
        on_event=watching(store, shown),
    )
    with anyio.move_on_after(1.0) as scope:
        await conversation.say("two notes please")
    assert scope.cancelled_caught
    stored = await store.read("c-2")
    assert stored == list(conversation.log)
    assert stored[-1].event.type == "finished"
    reopened = await Conversation.open(store, "c-2", agent=Agent([]), domain=Notes(), human=policy_human())
    assert list(reopened.log) == stored
    assert store.shown_first == []


async def test_many_conversations_at_once_each_store_their_whole_log(store: Witness) -> None:
    """Streamed replies and deferring people, 40 conversations in one task group: none loses what followed its
    message (every write lands, whichever task a cancellation or a thread hand-off falls in)."""
    conversations = []

    async def run(number: int) -> None:
        conversation = await Conversation.open(
            store,
            f"many-{number}",
            agent=StreamingAgent([REPLY], size=3),
            domain=Notes(),
            human=scripted_human(["defer", "defer"]),
            on_event=watching(store, []),
        )
        assert (await conversation.say("notes")).status == "awaiting"
        conversations.append(conversation)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for number in range(40):
                group.start_soon(run, number)
    for conversation in conversations:
        assert await store.read(conversation.id) == list(conversation.log)
        await anyio.lowlevel.checkpoint()
    assert store.shown_first == []
