"""The gate every door shares, on each kind of store: a call refused at once, run at once, or waiting for a person
who decides in another conversation object (as another process would, through the store), and the outcome handed
back once, never a second run, however the call is made again."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dial_runtime import Accept, Dismiss, Edit
from dial_runtime.doors.gate import Ended, Gate, Refused, Waits
from dial_runtime.stores import StorePort, open_store
from dial_runtime.views.person import Card, project

from . import desk
from .ledger import Ledger

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the stores wait on threads and servers."""
    return real_clocks


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.txt")


@pytest.fixture
async def store(url: str, keep: Callable[[StorePort], StorePort]) -> AsyncIterator[StorePort]:
    yield keep(open_store(url))


@pytest.fixture
def gate(ledger: Ledger, store: StorePort) -> Gate:
    return Gate(ledger, store, prefix="test")


async def decide(gate: Gate, waits: Waits, decision: Any, *, by: str = "ann", **options: Any) -> None:
    """Decide on the card as another process would: its own conversation object, the agent outside's."""
    await desk.decide(gate.store, waits, decision, by=by, domain=gate.domain, **options)


async def cards(gate: Gate, conversation_id: str) -> list[str]:
    entries = await gate.store.read(conversation_id)
    return [item.status for item in project(entries).items if isinstance(item, Card)]


REFUSED = [
    pytest.param("nope", {}, "unknown-action", None, id="unknown-tool"),
    pytest.param("append-line", {}, "invalid-payload", "text", id="missing-field"),
    pytest.param("append-line", {"text": 7}, "invalid-payload", "text", id="wrong-type"),
    pytest.param("append-line", {"text": "a", "more": 1}, "invalid-payload", None, id="unknown-field"),
    pytest.param("strike-line", {"text": "not there"}, "not-found", "text", id="domain-check"),
]


@pytest.mark.parametrize(("tool", "arguments", "code", "field"), REFUSED)
async def test_a_call_the_domain_refuses_is_refused_at_once_and_nothing_is_recorded(
    gate: Gate, tool: str, arguments: Any, code: str, field: str | None
) -> None:
    answer = await gate.propose(tool, arguments, by="mcp:test")
    assert isinstance(answer, Refused)
    assert (answer.code, answer.field) == (code, field) if field else answer.code == code
    assert answer.hint
    assert await gate.store.conversations() == []


async def test_a_read_only_call_runs_at_once_every_time(gate: Gate, ledger: Ledger) -> None:
    ledger.file.write_text("one\n", encoding="utf-8")
    first = await gate.propose("read-lines", {}, by="mcp:test")
    assert isinstance(first, Ended) and first.card.reported is not None
    assert first.card.reported.result == {"lines": ["one"]}
    ledger.file.write_text("one\ntwo\n", encoding="utf-8")
    again = await gate.propose("read-lines", {}, by="mcp:test")
    assert isinstance(again, Ended) and again.card.reported is not None
    assert again.card.reported.result == {"lines": ["one", "two"]}, "a read runs again, not answered from the log"


async def test_a_write_waits_and_the_same_call_again_is_the_same_card(gate: Gate, ledger: Ledger) -> None:
    first = await gate.propose("append-line", {"text": "milk"}, by="mcp:a")
    assert isinstance(first, Waits) and first.card.waiting
    again = await gate.propose("append-line", {"text": "milk"}, by="mcp:b")
    assert isinstance(again, Waits)
    assert (again.conversation_id, again.card.id) == (first.conversation_id, first.card.id)
    other = await gate.propose("append-line", {"text": "eggs"}, by="mcp:a")
    assert isinstance(other, Waits) and other.conversation_id != first.conversation_id
    assert await cards(gate, first.conversation_id) == ["deferred-waiting"]
    assert ledger.lines() == [], "nothing runs before a person decides"


async def test_a_decision_elsewhere_ends_the_wait_and_is_handed_back_once(gate: Gate, ledger: Ledger) -> None:
    waits = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(waits, Waits)
    async with anyio.create_task_group() as group:
        group.start_soon(decide, gate, waits, Accept())
        with anyio.fail_after(30):
            ended = await gate.settle(waits, by="mcp:test", within=30)
    assert isinstance(ended, Ended) and ended.card.reported is not None
    assert (ended.card.reported.status, ended.card.reported.result) == ("done", {"lines": 1})
    # Handed back: the same call again is a new proposal, whose card says it was done before.
    again = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(again, Waits) and again.card.id != waits.card.id
    assert again.card.done_before == waits.card.id
    assert ledger.lines() == ["milk"]


async def test_a_call_whose_answer_was_lost_finds_the_outcome_and_nothing_runs_twice(
    gate: Gate, ledger: Ledger
) -> None:
    waits = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(waits, Waits)
    await decide(gate, waits, Accept())  # decided while no call waited (the server was down, the client gone)
    found = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(found, Ended) and found.card.id == waits.card.id
    assert found.card.reported is not None and found.card.reported.status == "done"
    assert ledger.lines() == ["milk"], "the retry is answered from the log"
    fresh = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(fresh, Waits) and fresh.card.id != waits.card.id, "once handed back, a call is new"


@pytest.mark.parametrize(
    ("decision", "status", "edited", "lines"),
    [
        pytest.param(Dismiss(), "dismissed", False, [], id="dismissed"),
        pytest.param(Edit({"text": "oat milk"}), "done", True, ["oat milk"], id="edited"),
    ],
)
async def test_each_decision_comes_back_as_its_outcome(
    gate: Gate, ledger: Ledger, decision: Any, status: str, edited: bool, lines: list[str]
) -> None:
    waits = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(waits, Waits)
    await decide(gate, waits, decision)
    ended = await gate.settle(waits, by="mcp:test", within=30)
    assert isinstance(ended, Ended) and ended.card.reported is not None
    assert (ended.card.reported.status, ended.card.reported.edited) == (status, edited)
    assert ledger.lines() == lines
    if edited:
        assert (ended.card.proposed, ended.card.payload) == ({"text": "milk"}, {"text": "oat milk"})


async def test_a_card_nobody_decides_expires_at_its_deadline_while_the_call_waits(
    ledger: Ledger, store: StorePort
) -> None:
    gate = Gate(ledger, store, prefix="test", decide_timeout=0.5)
    waits = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(waits, Waits)
    with anyio.fail_after(20):
        ended = await gate.settle(waits, by="mcp:test", within=30)
    assert isinstance(ended, Ended) and ended.card.reported is not None
    assert (ended.card.reported.status, ended.card.reported.expired) == ("dismissed", True)
    assert ledger.lines() == []


async def test_a_wait_that_runs_out_leaves_the_card_waiting(gate: Gate, ledger: Ledger) -> None:
    waits = await gate.propose("append-line", {"text": "milk"}, by="mcp:test")
    assert isinstance(waits, Waits)
    still = await gate.settle(waits, by="mcp:test", within=0.3)
    assert isinstance(still, Waits) and still.card.waiting
    assert await cards(gate, waits.conversation_id) == ["deferred-waiting"]


async def test_a_policy_of_two_approvals_holds_the_call_until_both(gate: Gate, ledger: Ledger) -> None:
    waits = await gate.propose("sign-off", {"text": "q3"}, by="mcp:test")
    assert isinstance(waits, Waits)
    await decide(gate, waits, Accept(), by="ann")
    assert isinstance(await gate.settle(waits, by="mcp:test", within=0.3), Waits), "one approval of two"
    await decide(gate, waits, Accept(), by="ann")  # the same person again is no second approval
    assert isinstance(await gate.settle(waits, by="mcp:test", within=0.3), Waits)
    await decide(gate, waits, Accept(), by="bob")
    ended = await gate.settle(waits, by="mcp:test", within=30)
    assert isinstance(ended, Ended) and ended.card.reported is not None
    assert ended.card.reported.status == "done"
    assert ledger.lines() == ["signed: q3"]


ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


@given(action=st.text(min_size=1, max_size=200), payload=JSON, other=JSON, key=st.text(max_size=300))
def test_every_call_has_a_conversation_id_every_surface_serves(
    action: str, payload: Any, other: Any, key: str
) -> None:
    gate = Gate(object(), store=None, prefix="door")  # type: ignore[arg-type]
    keyed = gate.conversation_id(action, payload, key)
    assert ID.fullmatch(keyed), keyed
    assert keyed == gate.conversation_id("another", other, key), "a key names the call, whatever it asks"
    named = gate.conversation_id(action, payload)
    assert ID.fullmatch(named), named
    assert named == gate.conversation_id(action, json.loads(json.dumps(payload)))
    if json.dumps(payload, sort_keys=True) != json.dumps(other, sort_keys=True):
        assert named != gate.conversation_id(action, other)


@pytest.mark.parametrize("prefix", ["", "a b", "x/y", "p" * 65])
def test_a_prefix_no_surface_can_serve_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        Gate(object(), store=None, prefix=prefix)  # type: ignore[arg-type]


async def test_many_calls_at_once_each_become_one_card_and_same_calls_share_it(
    ledger: Ledger, store: StorePort
) -> None:
    """Calls in flight together, some the same: each distinct call one card, the same calls that card, however
    few conversations the gate may hold at once (each a store lock: a PostgreSQL connection)."""
    gate = Gate(ledger, store, prefix="test", concurrency=3)
    answers: list[Any] = []

    async def call(number: int) -> None:
        answers.append(await gate.propose("append-line", {"text": f"line {number % 20}"}, by="mcp:test"))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for number in range(60):
                group.start_soon(call, number)
    assert all(isinstance(answer, Waits) for answer in answers)
    cards_by_conversation = {(answer.conversation_id, answer.card.id) for answer in answers}
    assert len(cards_by_conversation) == 20
    assert len({conversation for conversation, _ in cards_by_conversation}) == 20


async def test_a_keyed_call_finds_its_card_for_good_and_a_reused_key_is_refused(
    gate: Gate, ledger: Ledger
) -> None:
    waits = await gate.propose("append-line", {"text": "milk"}, by="mcp:test", key="call-1")
    assert isinstance(waits, Waits)
    again = await gate.propose("append-line", {"text": "milk"}, by="mcp:test", key="call-1")
    assert isinstance(again, Waits) and again.card.id == waits.card.id
    other = await gate.propose("append-line", {"text": "milk"}, by="mcp:test", key="call-2")
    assert isinstance(other, Waits) and other.conversation_id != waits.conversation_id, "another key, another call"
    await decide(gate, waits, Accept())
    for _ in range(3):  # however often it is asked, and after it was handed back, a key gets its one outcome
        ended = await gate.propose("append-line", {"text": "milk"}, by="mcp:test", key="call-1")
        assert isinstance(ended, Ended) and ended.card.id == waits.card.id
    reused = await gate.propose("append-line", {"text": "eggs"}, by="mcp:test", key="call-1")
    assert isinstance(reused, Refused) and (reused.code, reused.field) == ("key-reused", "key")
    assert ledger.lines() == ["milk"]
