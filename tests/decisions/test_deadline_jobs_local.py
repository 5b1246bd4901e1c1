"""Deadlines fired in the serving process, for embedded stores: :class:`LocalDeadlines` sleeps until the soonest
deadline it was given and expires the conversation, on trio and asyncio with real clocks (the deadlines are on
the wall clock the conversations read). Also: what waits in a store (``waiting``), and ``PostgresDeadlines``
refusing trio, as Procrastinate runs on asyncio only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, Domain, scripted_human
from dial_runtime.decisions.deadlines import LocalDeadlines, PostgresDeadlines, conversation_opener, waiting
from dial_runtime.runtime.events import DecidedEvent, LogEntry, OutcomeEvent
from dial_runtime.stores import MemoryStore, SQLiteStore, StorePort
from dial_runtime.stores.jsonl import check_log

from ..fakes import Agent, Notes, envelope, suggest

pytestmark = pytest.mark.anyio

PROPOSE = envelope(suggest("add-note", '{"text": "milk"}'))

#: How late an expiry may be recorded past its deadline here (seconds): the timer wakes at the deadline.
LATE = 0.5


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Both backends on real clocks: the deadlines are on the wall clock."""
    return real_clocks


class SilentAgent:
    def send(self, message: str) -> str:
        raise AssertionError(f"an expiry sent the agent {message!r}")


async def deferred(store: StorePort, conversation_id: str, seconds: float) -> list[tuple[str, float]]:
    conversation = await Conversation.open(
        store,
        conversation_id,
        agent=Agent([PROPOSE]),
        domain=Notes(),
        human=scripted_human(["defer"]),
        decide_timeout=seconds,
    )
    assert (await conversation.say("add milk")).status == "awaiting"
    return conversation.deadlines


def expiries(log: list[LogEntry]) -> list[LogEntry]:
    return [e for e in log if isinstance(e.event, DecidedEvent) and e.event.decision == "expire"]


async def expired(store: StorePort, conversation_id: str, within: float) -> list[LogEntry]:
    with anyio.fail_after(within):
        while not expiries(log := await store.read(conversation_id)):
            await anyio.sleep(0.01)
    return log


async def test_local_deadlines_fire_in_process_on_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "logs.db"))
    try:
        opened = conversation_opener(store, agent=lambda *_: SilentAgent(), domain=Notes())
        async with LocalDeadlines(opened) as deadlines:
            later = await deferred(store, "c-2", 0.6)
            sooner = await deferred(store, "c-1", 0.3)
            await deadlines.schedule("c-2", later)
            await deadlines.schedule("c-1", sooner)
            await deadlines.schedule("c-1", sooner)  # again: nothing changes
            assert [c for c, _ in deadlines.scheduled] == ["c-1", "c-2"]
            for conversation_id, waited in (("c-1", sooner), ("c-2", later)):
                log = await expired(store, conversation_id, within=5)
                check_log(log)
                outcomes = [e.event for e in log if isinstance(e.event, OutcomeEvent)]
                assert [(o.status, o.expired) for o in outcomes] == [("dismissed", True)]
                (expiry,) = expiries(log)
                assert 0 <= expiry.time - waited[0][1] < LATE
            with anyio.fail_after(5):  # each deadline is let go once fired: from then on nothing fires again
                while deadlines.scheduled:
                    await anyio.sleep(0.01)
            assert len(expiries(await store.read("c-1"))) == 1
    finally:
        await store.aclose()


async def test_a_conversation_held_at_its_deadline_expires_once_it_is_let_go() -> None:
    store = MemoryStore()
    opened = conversation_opener(store, agent=lambda *_: SilentAgent(), domain=Notes())
    async with LocalDeadlines(opened) as deadlines:
        waits = await deferred(store, "c-1", 0.2)
        await deadlines.schedule("c-1", waits)
        async with store.lock("c-1"):  # a call of the serving process holds it past the deadline
            await anyio.sleep(0.5)
            assert expiries(await store.read("c-1")) == []
        released = time.time()
        (expiry,) = expiries(await expired(store, "c-1", within=5))
        assert expiry.time - released < 1.0  # tried again within half a second (the longest pause)


async def test_what_waits_in_a_store_is_read_from_its_logs(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "logs.db"))
    try:
        one = await deferred(store, "c-1", 30)
        two = await deferred(store, "c-2", 10)
        conversation = await Conversation.open(
            store, "c-3", agent=Agent([PROPOSE]), domain=Notes(), human=scripted_human(["defer"])
        )
        await conversation.say("no deadline")
        assert await waiting(store) == {"c-1": one, "c-2": two}
    finally:
        await store.aclose()


async def test_a_domain_factory_is_built_only_when_the_expiry_needs_it() -> None:
    store = MemoryStore()
    built: list[str] = []
    notes = Domain("notes")

    @notes.action(deadline=0.2)
    def add_note(text: str) -> None:
        """Add a note."""

    def factory(conversation_id: str, log: Any) -> Domain:
        built.append(conversation_id)
        return notes

    conversation = await Conversation.open(
        store, "c-1", agent=Agent([PROPOSE]), domain=notes, human=scripted_human(["defer"])
    )
    await conversation.say("add milk")
    built.clear()
    async with LocalDeadlines(conversation_opener(store, agent=lambda *_: SilentAgent(), domain=factory)) as d:
        await d.schedule("c-1", conversation.deadlines)
        log = await expired(store, "c-1", within=5)
    assert [(e.event.status, e.event.expired) for e in log if isinstance(e.event, OutcomeEvent)] == [
        ("dismissed", True)
    ]
    assert built == [""]  # the describing domain (for the flow), and no conversation's


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_postgres_deadlines_refuse_trio(anyio_backend: str) -> None:
    deadlines = PostgresDeadlines("postgresql:///nowhere")
    with pytest.raises(RuntimeError, match=r"asyncio only \(this is trio\)"):
        await deadlines.__aenter__()
    with pytest.raises(RuntimeError, match="asyncio only"):
        await deadlines.schedule("c-1", [("sg-1", time.time())])
