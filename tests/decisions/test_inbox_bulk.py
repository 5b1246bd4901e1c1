"""Bulk decisions from the inbox: each decision of a bulk is checked and recorded on its own (the digest the person
was shown, the approval policy, the deadline); one that no longer holds is refused alone with its reason while the
others go through; two bulks over the same cards decide each card once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dial_runtime import Conversation, scripted_human
from dial_runtime.decisions import inbox as inbox_module
from dial_runtime.decisions.deadlines import conversation_opener
from dial_runtime.decisions.inbox import BulkChoice, BulkOutcome, Inbox, decide_each
from dial_runtime.stores import StorePort, open_store
from dial_runtime.views.inbox import WaitingCard

from ..fakes import Agent, envelope, suggest
from .test_inbox import ACK, Clock, Desk, waiting_on

pytestmark = pytest.mark.anyio

NOTE = envelope(suggest("add-note", '{"text": "n"}'))
REFUND = envelope(suggest("refund", '{"amount": 5, "to": "x"}'))


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    return real_clocks


def opener(store: StorePort, clock: Clock, domain: Any = None) -> Any:
    """How the bulk opens each conversation: the desk domain, an agent that acknowledges what it is told."""
    return conversation_opener(
        store, agent=lambda *_: Agent([ACK] * 4), domain=domain or Desk(), clock=clock, timeout=None
    )


def choose(cards: list[WaitingCard], decision: str = "accept") -> list[BulkChoice]:
    return [
        BulkChoice(conversation=card.conversation, id=card.id, decision=decision, digest=card.digest or "")  # type: ignore[arg-type]
        for card in cards
    ]


async def decided(store: StorePort, conversation_id: str) -> list[tuple[str, str, str | None, str | None]]:
    """Every decision the conversation's log holds: (suggestion, decision, by, via)."""
    return [
        (entry.event.suggestion_id, entry.event.decision, entry.event.by, entry.event.via)
        for entry in await store.read(conversation_id)
        if entry.event.type == "decided"
    ]


async def test_each_card_of_a_bulk_is_decided_on_its_own_and_leaves_the_inbox(store: StorePort) -> None:
    clock = Clock()
    for number in range(4):
        await waiting_on(store, f"c-{number}", NOTE, clock)
    cards = await Inbox(store).waiting()
    outcomes = await decide_each(
        choose(cards[:3]) + choose(cards[3:], "dismiss"), open_conversation=opener(store, clock), by="ada"
    )
    assert [(each.conversation, each.decision, each.status, each.refused) for each in outcomes] == [
        ("c-0", "accept", "idle", None),
        ("c-1", "accept", "idle", None),
        ("c-2", "accept", "idle", None),
        ("c-3", "dismiss", "idle", None),
    ]
    assert await Inbox(store).waiting() == []
    for number in range(4):
        decision = "accept" if number < 3 else "dismiss"
        assert await decided(store, f"c-{number}") == [("sg-1", decision, "ada", "inbox")]


async def test_a_stale_selection_is_refused_card_by_card_and_the_rest_goes_through(store: StorePort) -> None:
    clock = Clock()
    for number in range(4):
        await waiting_on(store, f"c-{number}", NOTE, clock)
    cards = await Inbox(store).waiting()
    chosen = choose(cards)
    other = await Conversation.open(
        store, "c-0", agent=Agent([ACK]), domain=Desk(), human=scripted_human([]), clock=clock
    )
    await other.decide("sg-1", {"dismiss": True}, by="bob")  # ended meanwhile, by someone else
    chosen[1] = BulkChoice(conversation="c-1", id="sg-1", decision="accept", digest="sha256:stale")
    chosen[2] = BulkChoice(conversation="c-2", id="sg-9", decision="accept", digest=chosen[2].digest)
    outcomes = await decide_each(chosen, open_conversation=opener(store, clock), by="ada")
    assert [(each.conversation, each.refused) for each in outcomes] == [
        ("c-0", "already-decided"),
        ("c-1", "payload-changed"),
        ("c-2", "not-waiting"),
        ("c-3", None),
    ]
    assert outcomes[0].reason == "dismissed already by bob"
    assert outcomes[2].reason == "it does not wait for a decision in this conversation"
    assert [card.conversation for card in await Inbox(store).waiting()] == ["c-1", "c-2"]
    assert await decided(store, "c-1") == await decided(store, "c-2") == []


async def test_the_policy_and_the_application_refuse_a_decider_card_by_card(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "refund", REFUND, clock)
    await waiting_on(store, "note", NOTE, clock)
    await waiting_on(store, "other", NOTE, clock)
    cards = {card.conversation: card for card in await Inbox(store).waiting()}
    outcomes = await decide_each(
        choose([cards["refund"], cards["note"]]),
        open_conversation=opener(store, clock),
        by="ada",
        roles=["support"],
    )
    assert outcomes[0].refused == "approval-refused" and "finance" in outcomes[0].reason
    assert outcomes[1].refused is None
    assert sorted(card.conversation for card in await Inbox(store).waiting()) == ["other", "refund"]
    forbidden = await decide_each(
        choose([cards["other"]]), open_conversation=opener(store, clock), by="ada", may_decide=lambda _: False
    )
    assert [(each.refused, each.reason) for each in forbidden] == [("forbidden", "ada may not decide it")]
    assert await decided(store, "other") == []


async def test_two_approvals_of_a_refund_count_once_each_and_the_second_runs_it(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "refund", REFUND, clock)
    chosen = choose(await Inbox(store).waiting())
    first = await decide_each(chosen, open_conversation=opener(store, clock), by="ada", roles=["finance"])
    assert (first[0].status, first[0].refused) == ("awaiting", None)
    again = await decide_each(chosen, open_conversation=opener(store, clock), by="ada", roles=["finance"])
    assert again[0].refused == "approval-refused"
    second = await decide_each(chosen, open_conversation=opener(store, clock), by="bea", roles=["finance"])
    assert (second[0].status, second[0].refused) == ("idle", None)
    assert await Inbox(store).waiting() == []


async def test_a_choice_named_twice_or_no_concurrency_is_refused_and_nothing_is_decided(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "c-0", NOTE, clock)
    chosen = choose(await Inbox(store).waiting())
    with pytest.raises(ValueError, match="chosen twice"):
        await decide_each(chosen * 2, open_conversation=opener(store, clock), by="ada")
    with pytest.raises(ValueError, match="concurrency is at least 1"):
        await decide_each(chosen, open_conversation=opener(store, clock), by="ada", concurrency=0)
    assert await decided(store, "c-0") == []


async def test_a_held_conversation_is_waited_for_then_reported_busy_alone(
    store: StorePort, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    for number in range(2):
        await waiting_on(store, f"c-{number}", NOTE, clock)
    chosen = choose(await Inbox(store).waiting())
    monkeypatch.setattr(inbox_module, "BUSY_WAIT", 0.3)
    async with store.lock("c-0"):
        outcomes = await decide_each(chosen, open_conversation=opener(store, clock), by="ada")
    assert [(each.conversation, each.refused) for each in outcomes] == [("c-0", "busy"), ("c-1", None)]

    async def release_soon() -> None:
        async with store.lock("c-0"):
            await anyio.sleep(0.1)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(release_soon)
        await anyio.sleep(0.02)
        outcomes = await decide_each(chosen[:1], open_conversation=opener(store, clock), by="ada")
    assert [(each.conversation, each.refused) for each in outcomes] == [("c-0", None)]


class SlowToAnswer:
    """An agent that takes its time to answer what it is told after a decision."""

    async def send(self, message: str) -> str:
        await anyio.sleep(0.5)
        return ACK


async def test_a_decision_slower_than_the_wait_for_a_busy_conversation_is_not_cut_short(
    store: StorePort, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    await waiting_on(store, "c-0", NOTE, clock)
    chosen = choose(await Inbox(store).waiting())
    monkeypatch.setattr(inbox_module, "BUSY_WAIT", 0.2)
    slow = conversation_opener(store, agent=lambda *_: SlowToAnswer(), domain=Desk(), clock=clock, timeout=None)
    outcomes = await decide_each(chosen, open_conversation=slow, by="ada")
    assert [(each.status, each.refused) for each in outcomes] == [("idle", None)]
    assert await decided(store, "c-0") == [("sg-1", "accept", "ada", "inbox")]


async def test_two_people_bulk_deciding_overlapping_cards_decide_each_once(url: str) -> None:
    clock = Clock()
    setup = open_store(url)
    first_store = setup if url == "memory:" else open_store(url)
    second_store = setup if url == "memory:" else open_store(url)
    try:
        for number in range(12):
            await waiting_on(setup, f"c-{number:02}", NOTE, clock)
        cards = await Inbox(setup).waiting()
        domains = [Desk(), Desk()]
        results: dict[str, list[BulkOutcome]] = {}

        async def bulk(who: str, where: StorePort, chosen: list[BulkChoice], domain: Desk) -> None:
            results[who] = await decide_each(chosen, open_conversation=opener(where, clock, domain), by=who)

        async with anyio.create_task_group() as tasks:  # ada takes 0-8, bea 4-11 in the other order
            tasks.start_soon(bulk, "ada", first_store, choose(cards[:9]), domains[0])
            tasks.start_soon(bulk, "bea", second_store, choose(cards[4:][::-1]), domains[1])
        taken = [each for outcomes in results.values() for each in outcomes if each.refused is None]
        refused = [each for outcomes in results.values() for each in outcomes if each.refused is not None]
        assert sorted(each.conversation for each in taken) == [f"c-{number:02}" for number in range(12)]
        assert {each.refused for each in refused} <= {"already-decided"}
        assert len(refused) == 5
        for number in range(12):
            assert len(await decided(setup, f"c-{number:02}")) == 1
        assert sum(len(domain.notes) for domain in domains) == 12
        assert await Inbox(setup).waiting() == []
    finally:
        for each in {id(setup): setup, id(first_store): first_store, id(second_store): second_store}.values():
            await each.aclose()
