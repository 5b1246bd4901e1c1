"""Claiming, releasing and assigning a waiting card: each an event on the conversation's log, checked by the card's
rules (who its policy admits, whose claim holds), shown in the projection and the inbox, refused in words with
nothing changed, re-made by replay, and refused by the fold when a log breaks the rules."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from dial_runtime import AlreadyDecided, Conversation, project, replay, scripted_human
from dial_runtime.decisions.inbox import Inbox
from dial_runtime.errors import ClaimRefused, ConversationBusy, LogError, NotWaiting
from dial_runtime.runtime.events import AssignedEvent, ClaimedEvent, LogEntry, ReleasedEvent
from dial_runtime.runtime.state import fold_log
from dial_runtime.stores import StorePort, open_store

from ..fakes import Agent, envelope, suggest
from .test_inbox import ACK, Clock, Desk, waiting_on

pytestmark = pytest.mark.anyio

REFUND = envelope(suggest("refund", '{"amount": 5, "to": "x"}'))
NOTE = envelope(suggest("add-note", '{"text": "n"}'))
FINANCE = ("finance",)


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    return real_clocks


async def reopened(store: StorePort, clock: Clock, conversation_id: str = "r") -> Conversation:
    """The conversation as another worker opens it (nothing held in memory from the last call)."""
    return await Conversation.open(
        store, conversation_id, agent=Agent([ACK] * 3), domain=Desk(), human=scripted_human([]), clock=clock
    )


async def test_a_claim_shows_who_has_the_card_until_when_everywhere_and_ends_on_time(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    seen: list[str] = []
    conversation = await reopened(store, clock)
    conversation.on_event = lambda event: seen.append(event.type)
    until = await conversation.claim("sg-1", by="ana", roles=FINANCE, seconds=900)
    assert until == clock.now + 900
    assert seen == ["claimed"]
    card = project(await store.read("r")).card("sg-1")
    assert card is not None and (card.claimed_by, card.claimed_until, card.holder(clock.now)) == (
        "ana",
        until,
        "ana",
    )
    (listed,) = await Inbox(store, clock=clock).waiting()
    assert (listed.claimed_by, listed.claimed_until, listed.holder(clock.now)) == ("ana", until, "ana")
    assert listed.holder(until) is None  # a claim holds until its time runs out, not at it
    with pytest.raises(ClaimRefused) as held:
        await (await reopened(store, clock)).claim("sg-1", by="ben", roles=FINANCE)
    assert (held.value.code, held.value.holder, held.value.until) == ("claimed", "ana", until)
    assert str(held.value) == "'sg-1' refused (claimed): ana has claimed it."
    clock.now = until
    assert await (await reopened(store, clock)).claim("sg-1", by="ben", roles=FINANCE) == until + 1800
    assert (await Inbox(store, clock=clock).waiting())[0].holder(clock.now) == "ben"


async def test_the_holder_renews_and_releases_a_claim_and_nobody_else_releases_it(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    await (await reopened(store, clock)).claim("sg-1", by="ana", roles=FINANCE, seconds=60)
    clock.now += 30
    assert (
        await (await reopened(store, clock)).claim("sg-1", by="ana", roles=FINANCE, seconds=60) == clock.now + 60
    )
    with pytest.raises(ClaimRefused) as refused:
        await (await reopened(store, clock)).release("sg-1", by="ben")
    assert (refused.value.code, refused.value.hint) == ("not-claimed", "ben holds no claim on it.")
    await (await reopened(store, clock)).release("sg-1", by="ana")
    (listed,) = await Inbox(store, clock=clock).waiting()
    assert (listed.claimed_by, listed.holder(clock.now)) == (None, None)
    with pytest.raises(ClaimRefused, match="not-claimed"):
        await (await reopened(store, clock)).release("sg-1", by="ana")
    assert [entry.event.type for entry in await store.read("r")][-3:] == ["claimed", "claimed", "released"]


#: Claims the card's rules refuse: (by, roles, code, hint). The refund needs two approvers holding ``finance``.
REFUSED_CLAIMS = [
    ("", FINANCE, "unknown-claimant", "Say who makes the claim: claim with by=<who>."),
    ("bob", ("sales",), "not-a-decider", "It is decided by one of: finance."),
    ("bob", (), "not-a-decider", "It is decided by one of: finance."),
    ("ana", FINANCE, "already-approved", "ana approved it already; it waits for another approver."),
]


@pytest.mark.parametrize(("by", "roles", "code", "hint"), REFUSED_CLAIMS)
async def test_a_claim_the_rules_refuse_changes_nothing_and_says_why(
    store: StorePort, by: str, roles: tuple[str, ...], code: str, hint: str
) -> None:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    assert (await (await reopened(store, clock)).decide("sg-1", {"accept": True}, by="ana", roles=FINANCE)).status
    before = await store.read("r")
    rows = await Inbox(store, clock=clock).waiting()
    with pytest.raises(ClaimRefused) as refused:
        await (await reopened(store, clock)).claim("sg-1", by=by, roles=roles)
    assert (refused.value.code, refused.value.hint) == (code, hint)
    assert await store.read("r") == before
    assert await Inbox(store, clock=clock).waiting() == rows


async def test_a_card_that_is_not_waiting_is_refused_and_a_claim_needs_a_positive_time(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "n", NOTE, clock)
    conversation = await reopened(store, clock, "n")
    for seconds in (0, -5, math.inf, math.nan, "60"):
        with pytest.raises(ValueError, match="positive number of seconds"):
            await conversation.claim("sg-1", by="ana", seconds=seconds)  # type: ignore[arg-type]
    with pytest.raises(NotWaiting, match="'sg-9' is not awaiting a decision"):
        await conversation.claim("sg-9", by="ana")
    await conversation.decide("sg-1", {"dismiss": True}, by="bea")
    for attempt in (
        conversation.claim("sg-1", by="ana"),
        conversation.release("sg-1", by="ana"),
        conversation.assign("sg-1", by="ana", person="ben"),
    ):
        with pytest.raises(AlreadyDecided, match="by bea"):
            await attempt
    assert [entry.event.type for entry in await store.read("n")].count("claimed") == 0


async def test_a_claim_decides_nothing_and_locks_nobody_out(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "n", NOTE, clock)
    await (await reopened(store, clock, "n")).claim("sg-1", by="ana")
    result = await (await reopened(store, clock, "n")).decide("sg-1", {"accept": True}, by="ben")
    assert result.outcomes[0].status == "done"
    card = project(await store.read("n")).card("sg-1")
    assert card is not None and (card.decided_by, card.claimed_by, card.waiting) == ("ben", "ana", False)
    assert await Inbox(store, clock=clock).waiting() == []


async def test_an_assignment_routes_the_card_to_a_decider_and_ends_anothers_claim(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    await (await reopened(store, clock)).claim("sg-1", by="ana", roles=FINANCE)
    conversation = await reopened(store, clock)
    with pytest.raises(ClaimRefused) as refused:
        await conversation.assign("sg-1", by="ana", roles=FINANCE, person="bob", person_roles=("sales",))
    assert (refused.value.code, refused.value.hint) == ("assignee-not-a-decider", "bob may not decide it.")
    with pytest.raises(ClaimRefused) as refused:
        await conversation.assign("sg-1", by="ana", roles=FINANCE, role="ops")  # ops only once it escalates
    assert refused.value.hint == "The role ops does not approve it."
    with pytest.raises(ClaimRefused, match="not-a-decider"):
        await conversation.assign("sg-1", by="bob", roles=("sales",), role="finance")
    with pytest.raises(ValueError, match="a person or to a role, not both"):
        await conversation.assign("sg-1", by="ana", roles=FINANCE, person="ben", role="finance")
    await conversation.assign("sg-1", by="ana", roles=FINANCE, role="finance")
    (listed,) = await Inbox(store, clock=clock).waiting()
    assert (listed.assigned_to, listed.assigned_role, listed.holder(clock.now)) == (None, "finance", "ana")
    await (await reopened(store, clock)).assign(
        "sg-1", by="ana", roles=FINANCE, person="ben", person_roles=FINANCE
    )
    (listed,) = await Inbox(store, clock=clock).waiting()
    assert (listed.assigned_to, listed.assigned_role, listed.claimed_by) == ("ben", None, None)
    await (await reopened(store, clock)).assign("sg-1", by="ben", roles=FINANCE)  # taken back: assigned to nobody
    (listed,) = await Inbox(store, clock=clock).waiting()
    assert (listed.assigned_to, listed.assigned_role) == (None, None)
    trail = [moment.text for moment in project(await store.read("r")).trail if moment.label == "assigned"]
    assert trail == ["sg-1 to role finance by ana", "sg-1 to ben by ana", "sg-1 to nobody by ben"]


async def test_an_escalated_card_may_be_claimed_by_the_roles_it_escalated_to(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    with pytest.raises(ClaimRefused, match="not-a-decider"):
        await (await reopened(store, clock)).claim("sg-1", by="olga", roles=("ops",))
    clock.now += 3601  # the refund escalates to ops after an hour
    await (await reopened(store, clock)).claim("sg-1", by="olga", roles=("ops",))
    assert (await Inbox(store, clock=clock).waiting())[0].holder(clock.now) == "olga"


async def test_two_people_claiming_at_once_one_holds_it(store: StorePort) -> None:
    """Two workers (two store objects on one database) claim one card at once: one claim is logged, the other is
    refused, as the card's rules say, or told the conversation is busy: never two holders."""
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    url = store.url if hasattr(store, "url") else None  # type: ignore[attr-defined]
    second = store if url is None else open_store(url)
    outcomes: dict[str, str] = {}

    async def claim(by: str, on: StorePort) -> None:
        try:
            await (await reopened(on, clock)).claim("sg-1", by=by, roles=FINANCE)
            outcomes[by] = "held"
        except ClaimRefused as refused:
            outcomes[by] = refused.code
        except ConversationBusy:
            outcomes[by] = "busy"

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(claim, "ana", store)
                group.start_soon(claim, "ben", second)
    finally:
        if second is not store:
            await second.aclose()
    assert sorted(outcomes.values()) in (["claimed", "held"], ["busy", "held"])
    claims = [entry.event for entry in await store.read("r") if entry.event.type == "claimed"]
    assert len(claims) == 1 and outcomes[claims[0].by] == "held"


async def test_replay_remakes_claims_releases_and_assignments(store: StorePort) -> None:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    await (await reopened(store, clock)).claim("sg-1", by="ana", roles=FINANCE)
    clock.now += 10
    await (await reopened(store, clock)).assign(
        "sg-1", by="ana", roles=FINANCE, person="ben", person_roles=FINANCE
    )
    await (await reopened(store, clock)).claim("sg-1", by="ben", roles=FINANCE, seconds=120)
    await (await reopened(store, clock)).release("sg-1", by="ben")
    await (await reopened(store, clock)).decide("sg-1", {"accept": True}, by="ben", roles=FINANCE)
    report = replay(await store.read("r"), domain=Desk())
    assert report.ok, str(report)
    assert report.calls == 6


def _log(*events: Any, times: tuple[float, ...] = ()) -> list[LogEntry]:
    return [
        LogEntry(seq=seq, time=times[seq - 1] if times else 100.0, event=event)
        for seq, event in enumerate(events, start=1)
    ]


async def _refund_waiting(store: StorePort) -> list[LogEntry]:
    clock = Clock()
    await waiting_on(store, "r", REFUND, clock)
    return await store.read("r")


#: Entries no run of the runtime writes after a refund waiting for ``finance`` since the clock's start, each with
#: what the fold says.
BROKEN = [
    (ClaimedEvent(suggestion_id="sg-1", by="bob", until=2e9, roles=("sales",)), "its rules refuse the claim"),
    (ClaimedEvent(suggestion_id="sg-1", by="ana", until=1e9, roles=FINANCE), "ends after it is made"),
    (ClaimedEvent(suggestion_id="sg-1", by="ana", until=math.inf, roles=FINANCE), "ends after it is made"),
    (ClaimedEvent(suggestion_id="sg-2", by="ana", until=2e9, roles=FINANCE), "no suggestion 'sg-2' is open"),
    (ReleasedEvent(suggestion_id="sg-1", by="ana"), "its rules refuse the release \\(not-claimed"),
    (AssignedEvent(suggestion_id="sg-1", by="ana", roles=FINANCE, person="bo", role="finance"), "not both"),
    (AssignedEvent(suggestion_id="sg-1", by="ana", roles=FINANCE, role="ops"), "assignee-not-a-decider"),
]


@pytest.mark.parametrize(("event", "why"), BROKEN, ids=[f"{e.type}-{n}" for n, (e, _) in enumerate(BROKEN)])
async def test_the_fold_refuses_a_log_that_breaks_the_rules_of_holding_a_card(
    store: StorePort, event: Any, why: str
) -> None:
    entries = await _refund_waiting(store)
    fold_log(entries)
    tail = LogEntry(seq=len(entries) + 1, time=entries[-1].time + 1, event=event)
    with pytest.raises(LogError, match=why) as refused:
        fold_log([*entries, tail])
    assert refused.value.seq == tail.seq


async def test_the_fold_refuses_a_claim_in_the_middle_of_a_call(store: StorePort) -> None:
    entries = await _refund_waiting(store)
    at = next(index for index, entry in enumerate(entries) if entry.event.type == "deferred")
    moved = [
        *entries[: at + 1],
        LogEntry(
            seq=0,
            time=entries[at].time,
            event=ClaimedEvent(suggestion_id="sg-1", by="ana", until=2e9, roles=FINANCE),
        ),
        *entries[at + 1 :],
    ]
    renumbered = [
        LogEntry(seq=seq, time=entry.time, event=entry.event) for seq, entry in enumerate(moved, start=1)
    ]
    with pytest.raises(LogError, match="a 'claimed' happens only between calls"):
        fold_log(renumbered)
