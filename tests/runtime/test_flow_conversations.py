"""Graph-railed flows in a conversation: the flow's state is part of the fold, moved only by ``done`` outcomes,
checked at proposal and at a later accept, sent with every turn, durable, replayed, and ended by a final state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from statemachine import State, StateMachine

from dial_runtime import (
    Accept,
    ActionError,
    Conversation,
    Defer,
    Dismiss,
    Domain,
    replay,
    scripted_human,
    system_prompt,
)
from dial_runtime.errors import LogError
from dial_runtime.runtime.core import ConversationCore
from dial_runtime.runtime.effects import (
    Answer,
    Consult,
    ConsultRules,
    Effect,
    GetContext,
    LookUp,
    Ran,
    Replied,
    Review,
    Reviewed,
    RunAction,
    RunFailed,
    Send,
)
from dial_runtime.runtime.events import EndedEvent, FlowMovedEvent, LogEntry, entry_from_dict, entry_to_dict
from dial_runtime.runtime.flow import FlowRules
from dial_runtime.runtime.state import ConversationState, fold_log
from dial_runtime.stores import open_store

from ..fakes import Agent, Notes, envelope, folded, suggest
from .test_core import drive
from .test_flows import Order

ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")
ORDER = '{"order_id": "o-1"}'


orders = Domain("orders", flow=Order)


@orders.action(event="confirm")
def confirm_order(order_id: str) -> dict[str, str]:
    """Confirm the order; the order ``locked`` cannot be."""
    if order_id == "locked":
        raise ActionError("the order is locked", code="locked")
    return {"confirmed": order_id}


@orders.action(event="pay")
def take_payment(order_id: str) -> dict[str, str]:
    return {"paid": order_id}


@orders.action(event="cancel")
def cancel_order(order_id: str) -> None: ...


@orders.action(read_only=True)
def show_order(order_id: str) -> dict[str, str]:
    return {"id": order_id}


RULES = orders.flow_rules
assert RULES is not None


# --- the core on its own: no event loop -------------------------------------------------------------------------


class World:
    """Answers the core's effects from the orders domain (pure functions), a list of replies and a script of
    decisions."""

    def __init__(
        self,
        replies: list[str],
        decisions: list[Any] = (),  # type: ignore[assignment]
        *,
        then: str | None = None,
    ) -> None:
        self.replies = list(replies)
        self.then = then  # the reply once ``replies`` are used up (``None``: no further reply is expected)
        self.decisions = list(decisions)
        self.messages: list[str] = []

    def respond(self, effect: Effect) -> object:
        if isinstance(effect, GetContext):
            return None
        if isinstance(effect, Send):
            self.messages.append(effect.message)
            return Replied(self.replies.pop(0) if self.replies or self.then is None else self.then)
        if isinstance(effect, LookUp):
            return orders.actions.get(effect.action)
        if isinstance(effect, Review):
            issue = orders.validate(effect.action, effect.payload)
            shown = issue is None and effect.preview
            return Reviewed(issue, orders.preview(effect.action, effect.payload) if shown else "")
        if isinstance(effect, ConsultRules):  # no rules for whether to ask
            return None
        if isinstance(effect, Consult):
            return Answer(self.decisions.pop(0))
        if isinstance(effect, RunAction):
            try:
                return Ran(orders.run(effect.action, effect.payload))
            except ActionError as error:
                return RunFailed(error)
        raise AssertionError(f"unexpected effect {effect!r}")


def moves(core: ConversationCore) -> list[tuple[str, str, str]]:
    return [
        (event.source, event.event, event.target) for event in core.log.events if isinstance(event, FlowMovedEvent)
    ]


CASES: list[tuple[str, list[str], list[Any], str, list[tuple[str, str, str | None]], str]] = [
    (
        "a bound action ends done and moves the flow",
        [envelope(suggest("confirm-order", ORDER)), ACK],
        [Accept()],
        "idle",
        [("sg-1", "done", None)],
        "confirmed",
    ),
    (
        "a bound action not allowed now is invalid, unseen by the person",
        [envelope(suggest("take-payment", ORDER)), ACK],
        [],
        "idle",
        [("sg-1", "invalid", "not-allowed-now")],
        "draft",
    ),
    (
        "a dismissed action moves nothing",
        [envelope(suggest("confirm-order", ORDER))],
        [Dismiss()],
        "idle",
        [("sg-1", "dismissed", None)],
        "draft",
    ),
    (
        "a failed action moves nothing",
        [envelope(suggest("confirm-order", '{"order_id": "locked"}')), ACK],
        [Accept()],
        "idle",
        [("sg-1", "failed", "locked")],
        "draft",
    ),
    (
        "an unbound read-only action runs in every state and moves nothing",
        [envelope(suggest("show-order", ORDER)), ACK],
        [],
        "idle",
        [("sg-1", "done", None)],
        "draft",
    ),
    (
        "the second of two confirms in one reply is reviewed in the moved flow",
        [envelope(suggest("confirm-order", ORDER), suggest("confirm-order", ORDER)), ACK],
        [Accept()],
        "idle",
        [("sg-1", "done", None), ("sg-2", "invalid", "not-allowed-now")],
        "confirmed",
    ),
    (
        "a final state ends the conversation: no turn follows",
        [envelope(suggest("confirm-order", ORDER), suggest("take-payment", ORDER), suggest("show-order", ORDER))],
        [Accept(), Accept()],
        "ended",
        [("sg-1", "done", None), ("sg-2", "done", None), ("sg-3", "done", None)],
        "paid",
    ),
    (
        "an invalid payload is refused before the flow is asked",
        [envelope(suggest("take-payment", "{nope")), ACK],
        [],
        "idle",
        [("sg-1", "invalid", "not-allowed-now")],
        "draft",
    ),
    (
        "an unknown action is unknown, whatever the flow",
        [envelope(suggest("ship-order", ORDER)), ACK],
        [],
        "idle",
        [("sg-1", "invalid", "unknown-action")],
        "draft",
    ),
]


@pytest.mark.parametrize(
    ("replies", "decisions", "status", "expected", "flow_state"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_a_call_moves_the_flow_only_by_done_outcomes(
    replies: list[str],
    decisions: list[Any],
    status: str,
    expected: list[tuple[str, str, str | None]],
    flow_state: str,
) -> None:
    core = ConversationCore(flow=RULES)
    world = World(replies, decisions)
    result = drive(core.say("go"), world)
    assert (result.status, [(o.id, o.status, o.code) for o in result.outcomes]) == (status, expected)
    assert core.state.flow_state == flow_state
    assert world.replies == [] and world.decisions == []
    assert folded(core, RULES.table) == core.state


@given(st.lists(st.tuples(st.sampled_from(list(orders.actions)), st.booleans()), max_size=10))
def test_the_conversations_flow_follows_the_declared_machine(steps: list[tuple[str, bool]]) -> None:
    """Whatever the agent suggests and the person decides, one suggestion a call: a bound action is refused
    exactly where the declared machine refuses its event, the flow moves exactly as the machine does on each
    done outcome, and the conversation ends exactly when the machine reaches a final state."""
    declared = Order()
    core = ConversationCore(flow=RULES)
    for action, accepted in steps:
        if core.state.ended:
            assert declared.is_terminated
            break
        world = World([envelope(suggest(action, ORDER))], [Accept() if accepted else Dismiss()], then=ACK)
        (outcome,) = drive(core.say("go on"), world).outcomes
        event = orders.event_of(action)
        allowed = event is None or event in {e.id for e in declared.allowed_events}
        assert (outcome.code == "not-allowed-now") is not allowed
        if allowed and outcome.status == "done" and event is not None:
            declared.send(event)
        assert core.state.flow_state == declared.current_state_value
        assert core.state.ended is declared.is_terminated
    assert folded(core, RULES.table) == core.state


def test_the_refusal_names_the_state_and_the_allowed_actions() -> None:
    core = ConversationCore(flow=RULES)
    result = drive(core.say("go"), World([envelope(suggest("take-payment", ORDER)), ACK]))
    assert result.outcomes[0].hint == (
        "Not possible while the orders flow is in 'draft'; allowed now: `confirm-order`, `cancel-order`, "
        "`show-order`."
    )


def test_the_flow_moved_event_says_from_where_by_what() -> None:
    core = ConversationCore(flow=RULES)
    drive(core.say("go"), World([envelope(suggest("confirm-order", ORDER)), ACK], [Accept()]))
    moved = [event for event in core.log.events if isinstance(event, FlowMovedEvent)]
    assert moved == [
        FlowMovedEvent(
            source="draft", target="confirmed", event="confirm", suggestion_id="sg-1", action="confirm-order"
        )
    ]
    kinds = [event.type for event in core.log.events]
    assert kinds[kinds.index("flow-moved") - 1] == "outcome"


def test_a_final_state_is_the_conversations_result_and_later_words_are_only_logged() -> None:
    core = ConversationCore(flow=RULES)
    world = World([envelope(suggest("cancel-order", ORDER))], [Accept()])
    assert drive(core.say("go"), world).status == "ended"
    assert (core.state.ended, core.state.result, core.state.flow_state) == (True, "cancelled", "cancelled")
    ended = [event for event in core.log.events if isinstance(event, EndedEvent)]
    assert ended == [EndedEvent(reason="the orders flow reached 'cancelled'", result="cancelled")]
    later = World([])
    assert drive(core.say("hello?"), later).status == "ended"
    assert later.messages == []


def test_every_turn_carries_the_flows_state_and_what_it_allows() -> None:
    core = ConversationCore(flow=RULES)
    world = World([envelope(suggest("confirm-order", ORDER)), ACK], [Accept()])
    drive(core.say("go"), world)
    first, second = world.messages
    assert first == f"{RULES.context('draft')}\n\ngo"
    assert '<flow name="orders" state="confirmed" allowed="take-payment cancel-order show-order"/>' in second
    assert second.index("sg-1:done") < second.index("<flow ")


def test_an_accept_after_the_flow_moved_is_refused_and_the_suggestion_waits_again() -> None:
    core = ConversationCore(flow=RULES)
    reply = envelope(suggest("confirm-order", ORDER), suggest("confirm-order", ORDER))
    assert drive(core.say("go"), World([reply], [Defer(), Defer()])).status == "awaiting"
    assert drive(core.decide("sg-1", Accept(), "ada"), World([ACK])).status == "awaiting"
    assert core.state.flow_state == "confirmed"
    refused = drive(core.decide("sg-2", Accept(), "ada"), World([]))
    assert refused.status == "awaiting" and refused.outcomes == ()
    (waiting,) = refused.pending
    assert waiting.id == "sg-2" and waiting.issue is not None
    assert (waiting.issue.code, waiting.issue.hint) == (
        "not-allowed-now",
        "Not possible while the orders flow is in 'confirmed'; allowed now: `take-payment`, `cancel-order`, "
        "`show-order`.",
    )
    dismissed = drive(core.decide("sg-2", Dismiss(), "ada"), World([ACK]))
    assert [(o.id, o.status) for o in dismissed.outcomes] == [("sg-2", "dismissed")]
    assert moves(core) == [("draft", "confirm", "confirmed")]


def test_an_accept_refused_three_times_ends_invalid() -> None:
    core = ConversationCore(flow=RULES)
    reply = envelope(suggest("confirm-order", ORDER), suggest("confirm-order", ORDER))
    drive(core.say("go"), World([reply], [Defer(), Defer()]))
    drive(core.decide("sg-1", Accept(), None), World([]))
    for _ in range(2):
        assert drive(core.decide("sg-2", Accept(), None), World([])).status == "awaiting"
    world = World([ACK])
    result = drive(core.decide("sg-2", Accept(), None), world)
    assert [(o.id, o.status, o.code) for o in result.outcomes] == [("sg-2", "invalid", "not-allowed-now")]
    assert "sg-1:done" in world.messages[0] and "sg-2:invalid" in world.messages[0]


def test_a_core_without_a_flow_sends_no_flow_context_and_moves_nothing() -> None:
    core = ConversationCore()
    world = World([envelope(suggest("take-payment", ORDER)), ACK], [Accept()])
    drive(core.say("go"), world)
    assert world.messages[0] == "go" and core.state.flow_state is None and moves(core) == []


# --- the fold refuses a flow-moved no run could have written ---------------------------------------------------


def finished_log() -> list[LogEntry]:
    """A log in which the order is confirmed, then paid (the conversation ended ``paid``)."""
    core = ConversationCore(flow=RULES)
    reply = envelope(suggest("confirm-order", ORDER), suggest("take-payment", ORDER))
    drive(core.say("go"), World([reply], [Accept(), Accept()]))
    assert core.state.result == "paid"
    return list(core.log.entries())


def _corrupt(log: list[LogEntry], kind: str, **changes: Any) -> list[LogEntry]:
    index = next(i for i, entry in enumerate(log) if entry.event.type == kind)
    event = msgspec.structs.replace(log[index].event, **changes)  # type: ignore[type-var]
    return [*log[:index], msgspec.structs.replace(log[index], event=event), *log[index + 1 :]]


@pytest.mark.parametrize(
    ("kind", "changes", "message"),
    [
        ("flow-moved", {"source": "confirmed"}, "the flow is in 'draft', not 'confirmed'"),
        ("flow-moved", {"target": "paid"}, "'confirm' leads the flow Order elsewhere than 'paid'"),
        ("flow-moved", {"event": "pay"}, "Order: event 'pay' is not allowed in state 'draft'"),
        ("flow-moved", {"event": "ship"}, "Order: event 'ship' is not allowed in state 'draft'"),
        ("flow-moved", {"source": "shipped"}, "not 'shipped'"),
        ("flow-moved", {"suggestion_id": "sg-2"}, "only right after a done outcome"),
        ("flow-moved", {"action": "take-payment"}, "was 'confirm-order', not 'take-payment'"),
        ("ended", {"result": "cancelled"}, "the result 'cancelled' is not the flow's state 'paid'"),
    ],
)
def test_a_flow_moved_the_flow_does_not_allow_is_a_log_error(
    kind: str, changes: dict[str, Any], message: str
) -> None:
    corrupt = _corrupt(finished_log(), kind, **changes)
    with pytest.raises(LogError, match=message):
        fold_log(corrupt, flow=RULES.table)
    with pytest.raises(LogError):
        Conversation(agent=Agent([]), domain=orders, human=scripted_human([]), log=corrupt)


def test_a_result_that_is_no_final_state_is_a_log_error() -> None:
    log = finished_log()
    moved = next(i for i, entry in enumerate(log) if entry.event.type == "flow-moved")
    forged = LogEntry(seq=moved + 2, time=0.0, event=EndedEvent(reason="forged", result="confirmed"))
    corrupt = [*log[: moved + 1], forged]
    with pytest.raises(LogError, match="'confirmed' is not a final state of the flow Order"):
        fold_log(corrupt, flow=RULES.table)


def test_a_flow_moved_without_a_done_outcome_before_it_is_a_log_error() -> None:
    log = finished_log()
    moved = next(i for i, entry in enumerate(log) if entry.event.type == "flow-moved")
    dropped = [entry for i, entry in enumerate(log) if i != moved - 1]
    renumbered = [msgspec.structs.replace(entry, seq=seq) for seq, entry in enumerate(dropped, start=1)]
    with pytest.raises(LogError, match="a flow moves only right after a done outcome"):
        fold_log(renumbered, flow=RULES.table)


def test_a_log_folded_without_the_flow_still_follows_its_moves() -> None:
    state = ConversationState.fold(entry.event for entry in finished_log())
    assert (state.flow_state, state.result) == ("paid", "paid")
    log = finished_log()
    second = [i for i, entry in enumerate(log) if entry.event.type == "flow-moved"][1]
    event = msgspec.structs.replace(log[second].event, source="draft")  # type: ignore[type-var]
    gap = [*log[:second], msgspec.structs.replace(log[second], event=event), *log[second + 1 :]]
    with pytest.raises(LogError, match="the flow is in 'confirmed', not 'draft'"):
        fold_log(gap)


def test_flow_events_round_trip_through_json() -> None:
    log = finished_log()
    assert {"flow-moved", "ended"} <= {entry.event.type for entry in log}
    assert [entry_from_dict(json.loads(json.dumps(entry_to_dict(entry)))) for entry in log] == log


# --- the driver: durable, replayed, and the domain's capability read once ---------------------------------------


@pytest.mark.anyio
async def test_a_stored_conversation_reopened_mid_flow_is_where_it_was(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'orders.db'}"
    store = open_store(url)
    try:
        first = await Conversation.open(
            store,
            "o-1",
            agent=Agent([envelope(suggest("confirm-order", ORDER)), ACK]),
            domain=orders,
            human=scripted_human(["accept"]),
        )
        assert (await first.say("confirm it")).status == "idle"
        assert first.flow_state == "confirmed"
    finally:
        await store.aclose()
    store = open_store(url)
    try:
        agent = Agent([envelope(suggest("confirm-order", ORDER), suggest("take-payment", ORDER))])
        again = await Conversation.open(store, "o-1", agent=agent, domain=orders, human=scripted_human(["accept"]))
        assert (again.flow_state, again.result, again.ended) == ("confirmed", None, False)
        result = await again.say("pay now")
        assert 'state="confirmed"' in agent.sent[0]
        assert [(o.id, o.status, o.code) for o in result.outcomes] == [
            ("sg-2", "invalid", "not-allowed-now"),
            ("sg-3", "done", None),
        ]
        assert (result.status, again.result) == ("ended", "paid")
    finally:
        await store.aclose()
    store = open_store(url)
    try:
        last = await Conversation.open(store, "o-1", agent=Agent([]), domain=orders, human=scripted_human([]))
        assert (last.flow_state, last.result, last.ended) == ("paid", "paid", True)
        assert (await last.say("anything else?")).status == "ended"
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_a_flow_conversation_replays_without_divergence() -> None:
    agent = Agent(
        [
            envelope(suggest("take-payment", ORDER), suggest("confirm-order", ORDER)),
            envelope(suggest("confirm-order", ORDER)),
            ACK,
            envelope(suggest("cancel-order", ORDER)),
        ]
    )
    conversation = Conversation(agent=agent, domain=orders, human=scripted_human(["defer", "accept"]))
    assert (await conversation.say("go")).status == "awaiting"
    assert (await conversation.decide("sg-2", Accept())).status == "idle"
    assert (await conversation.say("cancel it")).status == "ended"
    assert (conversation.flow_state, conversation.result) == ("cancelled", "cancelled")
    report = replay(conversation.log, domain=orders)
    assert report.divergences == ()
    assert report.calls == 3


class DuckOrders(Notes):
    """A duck-typed domain whose ``flow_rules`` is not a :class:`FlowRules`: the conversation has no flow."""

    flow_rules = "not rules"


@pytest.mark.anyio
async def test_a_domain_without_flow_rules_has_no_flow() -> None:
    agent = Agent([envelope(suggest("add-note", '{"text": "milk"}')), ACK])
    conversation = Conversation(agent=agent, domain=DuckOrders(), human=scripted_human(["accept"]))
    await conversation.say("go")
    assert (conversation.flow_state, conversation.result) == (None, None)
    assert "<flow" not in agent.sent[0]


def test_flow_rules_refuse_what_a_flow_cannot_be() -> None:
    class Guarded(StateMachine):
        start = State(initial=True)
        end = State(final=True)
        go = start.to(end, cond="ready")

    with pytest.raises(TypeError, match="guarded transitions"):
        Domain("g", flow=Guarded)
    with pytest.raises(ValueError, match="is a hand-off, whose outcome is never done"):
        Domain("h", flow=Order).action(event="confirm", handoff=True)(confirm_order)
    with pytest.raises(ValueError, match="no event 'ship'"):
        FlowRules(name="x", table=RULES.table, actions=("a",), events={"a": "ship"})
    with pytest.raises(ValueError, match="'b' bound to 'pay' is not declared"):
        FlowRules(name="x", table=RULES.table, actions=("a",), events={"b": "pay"})


def test_the_system_prompt_describes_the_flow() -> None:
    prompt = system_prompt(orders)
    assert "# This application's flow" in prompt
    assert "It starts in `draft`" in prompt
    assert "`paid` and `cancelled` end the conversation" in prompt
    assert f"```\n{RULES.context('draft')}\n```" in prompt
    assert "- in `draft`: `confirm-order` -> `confirmed`, `cancel-order` -> `cancelled`\n" in prompt
    assert "- in `confirmed`: `take-payment` -> `paid`, `cancel-order` -> `cancelled`\n" in prompt
    assert "`show-order` is possible in every state and moves nothing." in prompt


@pytest.mark.parametrize("corrupt", [False, True], ids=["as-recorded", "a-move-from-nowhere"])
def test_import_takes_a_flow_log_and_refuses_one_whose_moves_do_not_follow(
    corrupt: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Imported without the domain, a log's moves must still follow one another (each from the state the last
    one reached); the table's own rules are checked when a conversation or a replay folds it with the domain."""
    from dial_runtime.cli import main
    from dial_runtime.stores.jsonl import export_jsonl

    log = finished_log()
    if corrupt:
        second = [i for i, entry in enumerate(log) if entry.event.type == "flow-moved"][1]
        event = msgspec.structs.replace(log[second].event, source="draft")  # type: ignore[type-var]
        log[second] = msgspec.structs.replace(log[second], event=event)
    path = tmp_path / "orders.jsonl"
    with path.open("w", encoding="utf-8") as file:
        export_jsonl(log, file, conversation_id="o-1")
    store = f"sqlite:{tmp_path / 'c.db'}"
    status = main(["import", str(path), "--store", store])
    err = capsys.readouterr().err
    if corrupt:
        assert status == 1 and err.count("\n") == 1 and "the flow is in 'confirmed', not 'draft'" in err, err
        return
    assert (status, err) == (0, "")
    assert main(["list", "--store", store]) == 0
    assert capsys.readouterr().out.rstrip().endswith("ended: paid"), "list says which final state ended it"


def test_the_audit_trail_shows_each_move_and_the_result() -> None:
    from dial_runtime.cli.log import audit_line

    lines = [line for entry in finished_log() if (line := audit_line(entry)) is not None]
    moved = [line.split("  ", 1)[1] for line in lines if "flow moved" in line]
    assert [" ".join(line.split()[1:]) for line in moved] == [
        "flow moved draft → confirmed on confirm (sg-1 confirm-order done)",
        "flow moved confirmed → paid on pay (sg-2 take-payment done)",
    ]
    assert any(line.endswith("ended         the orders flow reached 'paid'") for line in lines)


def orders_domain() -> Domain:
    """The orders domain, as ``--domain tests.runtime.test_flow_conversations:orders_domain`` names it."""
    return orders


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_chat_says_which_final_state_ended_the_conversation(tmp_path: Path) -> None:
    from ..terminal.test_terminal import Terminal

    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("cancel-order", ORDER))]))
    domain = "tests.runtime.test_flow_conversations:orders_domain"
    term = Terminal("chat", "--agent", f"script:{script}", "--domain", domain)
    try:
        term.type("cancel it", after="you:")
        term.type("a", after="sg-1 ›")
        term.expect("(the conversation has ended: cancelled)")
        assert term.finish() == 0, "an ended conversation ends the chat"
    finally:
        if term.child.isalive():
            term.child.terminate(force=True)


def test_an_ended_event_written_before_results_existed_still_reads() -> None:
    from dial_runtime.stores.jsonl import import_jsonl

    header = '{"format": "dial-runtime-log", "version": 1, "conversation_id": "old"}'
    line = '{"seq":1,"time":1.0,"event":{"type":"ended","reason":"end() was called"}}'
    (_, (entry,)) = import_jsonl([header, line])
    assert entry.event == EndedEvent(reason="end() was called", result=None)
