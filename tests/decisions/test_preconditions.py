"""A waiting card that no longer holds: an action's precondition is checked when a suggestion is shown, before it
runs, and every ``recheck_every`` seconds while it waits; one whose premise no longer holds ends ``invalid`` with
the domain's reason, the agent is told, and nothing runs. A check that holds leaves no trace; replay answers the
checks from the log; a log whose lapse no run could have written is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from dial_runtime import AlreadyDecided, Conversation, Defer, Domain, Issue, project, replay
from dial_runtime.decisions.deadlines import LocalDeadlines, conversation_opener, waiting
from dial_runtime.errors import LogError
from dial_runtime.runtime.events import DecidedEvent, LogEntry, OutcomeEvent, SuggestionEvent
from dial_runtime.runtime.records import ActionSpec
from dial_runtime.runtime.state import fold_log
from dial_runtime.stores import SQLiteStore, StorePort

from ..fakes import Agent, Notes, envelope, suggest
from .test_inbox import ACK, Clock

pytestmark = pytest.mark.anyio

EVERY = 60.0


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    return real_clocks


class Books:
    """Invoices, some unpaid; paying one runs only while it is unpaid."""

    def __init__(self, every: float = EVERY) -> None:
        self.unpaid = {"inv-1", "inv-2"}
        self.paid: list[str] = []
        self.checks = 0
        self.domain = Domain("books")

        def unpaid(invoice: str) -> str | None:
            self.checks += 1
            return None if invoice in self.unpaid else f"invoice {invoice} is paid already"

        @self.domain.action(precondition=unpaid, recheck_every=every)
        def pay_invoice(invoice: str) -> dict[str, str]:
            self.unpaid.discard(invoice)
            self.paid.append(invoice)
            return {"paid": invoice}


class Person:
    """Defers every decision."""

    def decide(self, suggestion: Any) -> Defer:
        return Defer()


PAY = envelope(suggest("pay-invoice", '{"invoice": "inv-1"}'))
REASON = "invoice inv-1 is paid already"


async def paying(store: StorePort, clock: Clock, books: Books, agent: Agent) -> Conversation:
    """A conversation of ``store`` whose agent proposed paying inv-1, left waiting for a decision."""
    conversation = await Conversation.open(
        store, "b", agent=agent, domain=books.domain, human=Person(), clock=clock
    )
    assert (await conversation.say("pay inv-1")).status == "awaiting"
    return conversation


def outcome(log: list[LogEntry]) -> OutcomeEvent:
    (ended,) = [entry.event for entry in log if isinstance(entry.event, OutcomeEvent)]
    return ended


async def test_a_premise_that_fails_when_shown_is_never_shown(store: StorePort) -> None:
    books, agent = Books(), Agent([PAY, ACK])
    books.unpaid.clear()
    conversation = await Conversation.open(store, "b", agent=agent, domain=books.domain, human=Person())
    await conversation.say("pay inv-1")
    log = await store.read("b")
    assert not [entry for entry in log if isinstance(entry.event, SuggestionEvent)]
    ended = outcome(log)
    assert (ended.status, ended.code, ended.hint, ended.trigger) == (
        "invalid",
        "precondition-failed",
        REASON,
        "reject",
    )
    assert REASON in agent.sent[-1]  # told at once, as any invalid outcome
    assert books.paid == []


async def test_a_premise_that_broke_while_waiting_ends_the_card_when_it_is_accepted(store: StorePort) -> None:
    clock, books, agent = Clock(), Books(), Agent([PAY, ACK])
    conversation = await paying(store, clock, books, agent)
    books.unpaid.discard("inv-1")  # someone paid it elsewhere
    clock.now += EVERY / 2  # before a scheduled check is due: the decision's own check finds it
    result = await conversation.decide("sg-1", {"accept": True}, by="ana")
    assert [(each.status, each.code, each.hint) for each in result.outcomes] == [
        ("invalid", "precondition-failed", REASON)
    ]
    log = await store.read("b")
    decided = [entry.event for entry in log if isinstance(entry.event, DecidedEvent)]
    assert [(each.decision, each.by) for each in decided] == [("accept", "ana")]  # what ana did, kept
    assert outcome(log).trigger == "lapse"
    assert books.paid == []
    assert REASON in agent.sent[-1]
    card = project(log).card("sg-1")
    assert card is not None and (card.status, card.outcome) == ("invalid", f"Invalid: {REASON}")
    assert replay(log).ok


async def test_a_scheduled_check_that_holds_leaves_no_trace_and_one_that_fails_tells_the_agent(
    store: StorePort,
) -> None:
    clock, books, agent = Clock(), Books(), Agent([PAY, ACK])
    conversation = await paying(store, clock, books, agent)
    since = clock.now
    assert conversation.deadlines == [("sg-1", since + EVERY)]
    before, checks = len(await store.read("b")), books.checks
    clock.now = since + EVERY + 1
    assert (await conversation.expire_due()).status == "idle"
    assert len(await store.read("b")) == before  # it held: nothing logged
    assert books.checks == checks + 1
    assert conversation.deadlines == [("sg-1", since + 2 * EVERY)]
    assert await waiting(store) != {}  # a scheduler starting now finds the next check
    books.unpaid.discard("inv-1")
    clock.now = since + 2 * EVERY
    result = await conversation.expire_due()
    assert [(each.status, each.hint) for each in result.outcomes] == [("invalid", REASON)]
    assert REASON in agent.sent[-1]  # a turn followed at once: the agent is told
    log = await store.read("b")
    assert [entry.event.type for entry in log[before:]][:2] == ["resumed", "outcome"]
    assert conversation.deadlines == []
    assert replay(log).ok
    with pytest.raises(AlreadyDecided, match=r"'sg-1' was already decided \(invalid\)"):
        await conversation.decide("sg-1", {"accept": True}, by="ana")


async def test_a_call_after_a_check_came_due_checks_first(store: StorePort) -> None:
    clock, books, agent = Clock(), Books(), Agent([PAY, ACK, ACK])
    conversation = await paying(store, clock, books, agent)
    books.unpaid.discard("inv-1")
    clock.now += EVERY * 3  # the scheduler never ran: the next call checks before it does anything
    with pytest.raises(AlreadyDecided):
        await conversation.decide("sg-1", {"accept": True}, by="ana")
    assert outcome(await store.read("b")).trigger == "lapse"
    assert books.paid == []


async def test_a_premise_check_that_raises_leaves_the_card_waiting(store: StorePort) -> None:
    clock, books, agent = Clock(), Books(), Agent([PAY, ACK])
    conversation = await paying(store, clock, books, agent)
    asked: list[str] = []

    def broken(action: str, payload: Any) -> Any:
        asked.append(action)
        raise RuntimeError("the ledger is down")

    books.domain.precondition = broken  # type: ignore[method-assign]
    logged = len(await store.read("b"))
    clock.now += EVERY + 1
    assert (await conversation.expire_due()).status == "idle"
    assert asked == ["pay-invoice"]  # the check was made, and its failure taken as holding
    assert len(await store.read("b")) == logged
    assert [card.id for card in conversation.pending] == ["sg-1"]


class PlainBooks(Notes):
    """A plain domain class declaring the premise of ``add-note`` in its spec's dict form."""

    actions = {"add-note": {"mutates": True, "precondition": True, "recheck_every": 30}}  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__()
        self.open = True

    def precondition(self, action: str, payload: Any) -> Any:
        return None if self.open else Issue(code="closed", hint="The notebook was closed.")


async def test_a_plain_domain_declares_a_premise_in_its_spec(store: StorePort) -> None:
    clock, domain = Clock(), PlainBooks()
    agent = Agent([envelope(suggest("add-note", '{"text": "n"}')), ACK])
    conversation = await Conversation.open(store, "p", agent=agent, domain=domain, human=Person(), clock=clock)
    await conversation.say("note")
    domain.open = False
    clock.now += 31
    result = await conversation.expire_due()
    assert [(each.status, each.code, each.hint) for each in result.outcomes] == [
        ("invalid", "closed", "The notebook was closed.")
    ]


def test_a_recheck_needs_a_premise_and_a_positive_period() -> None:
    with pytest.raises(ValueError, match="recheck_every needs a precondition"):
        ActionSpec(mutates=True, recheck_every=10)
    with pytest.raises(ValueError, match="recheck_every is a positive number"):
        ActionSpec(mutates=True, precondition=True, recheck_every=0)
    with pytest.raises(ValueError, match="recheck_every needs a precondition"):
        Domain("x").action(recheck_every=10)(lambda text: None)  # type: ignore[arg-type]


async def _lapsed_log(store: StorePort) -> list[LogEntry]:
    clock, books, agent = Clock(), Books(), Agent([PAY, ACK])
    conversation = await paying(store, clock, books, agent)
    books.unpaid.clear()
    await conversation.decide("sg-1", {"accept": True}, by="ana")
    return await store.read("b")


def _replaced(log: list[LogEntry], kind: type, **fields: Any) -> list[LogEntry]:
    at = next(index for index, entry in enumerate(log) if isinstance(entry.event, kind))
    event = msgspec.structs.replace(log[at].event, **fields)
    return [*log[:at], msgspec.structs.replace(log[at], event=event), *log[at + 1 :]]


@pytest.mark.parametrize(
    ("kind", "fields", "why"),
    [
        (SuggestionEvent, {"precondition": False, "recheck_every": None}, "checks no premise of it"),
        (SuggestionEvent, {"precondition": False}, "has no premise"),
        (SuggestionEvent, {"mutates": False}, "no premise of it is checked"),
        (OutcomeEvent, {"status": "dismissed"}, "cannot end 'dismissed'"),
    ],
)
async def test_the_fold_refuses_a_lapse_no_run_could_have_logged(
    store: StorePort, kind: type, fields: dict[str, Any], why: str
) -> None:
    with pytest.raises(LogError, match=why):
        fold_log(_replaced(await _lapsed_log(store), kind, **fields))


async def test_replay_rechecked_against_a_domain_whose_premise_holds_diverges(store: StorePort) -> None:
    log = await _lapsed_log(store)
    assert replay(log).ok
    assert not replay(log, domain=Books().domain, recheck=True).ok  # inv-1 is unpaid there: it would have run


async def test_the_deadline_scheduler_checks_a_premise_while_nobody_watches(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "books.db"))
    books, told = Books(every=0.2), Agent([ACK])
    try:
        opened = conversation_opener(store, agent=lambda *_: told, domain=books.domain)
        async with LocalDeadlines(opened) as deadlines:
            conversation = await Conversation.open(
                store, "b", agent=Agent([PAY]), domain=books.domain, human=Person()
            )
            assert (await conversation.say("pay inv-1")).status == "awaiting"
            logged = len(await store.read("b"))
            await deadlines.schedule("b", conversation.deadlines)
            with anyio.fail_after(5):
                while books.checks < 3:  # shown, then checked again on schedule, holding
                    await anyio.sleep(0.01)
            assert len(await store.read("b")) == logged
            books.unpaid.clear()
            with anyio.fail_after(5):
                while not [entry for entry in await store.read("b") if isinstance(entry.event, OutcomeEvent)]:
                    await anyio.sleep(0.01)
            assert outcome(await store.read("b")).trigger == "lapse"
            with anyio.fail_after(5):
                while not told.sent:
                    await anyio.sleep(0.01)
            assert REASON in told.sent[-1]
    finally:
        await store.aclose()
