"""Graph-railed flows, the declaration side: a Domain whose actions follow a declared state machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from dial_runtime import Conversation, Domain, Issue, ScriptedAgent, policy_human
from dial_runtime.cli import main
from dial_runtime.errors import IllegalTransition


class Order(StateMachine):
    """An order, from draft to paid or cancelled."""

    draft = State(initial=True)
    confirmed = State()
    paid = State(final=True)
    cancelled = State(final=True)

    confirm = draft.to(confirmed)
    pay = confirmed.to(paid)
    cancel = cancelled.from_(draft, confirmed)


orders = Domain("orders", flow=Order)


@orders.action(event="confirm")
def confirm_order(order_id: str) -> dict[str, str]:
    """Confirm the order."""
    return {"confirmed": order_id}


@orders.action(event="pay", destructive=True)
def take_payment(order_id: str, amount: float) -> dict[str, float]:
    return {"paid": amount}


@orders.action(event="cancel")
def cancel_order(order_id: str) -> None: ...


@orders.action(read_only=True)
def show_order(order_id: str) -> dict[str, str]:
    return {"id": order_id}


@pytest.mark.parametrize(
    ("state", "action", "allowed"),
    [
        ("draft", "confirm-order", True),
        ("draft", "take-payment", False),
        ("draft", "cancel-order", True),
        ("draft", "show-order", True),
        ("confirmed", "confirm-order", False),
        ("confirmed", "take-payment", True),
        ("confirmed", "cancel-order", True),
        ("paid", "cancel-order", False),
        ("paid", "show-order", True),
        ("cancelled", "take-payment", False),
    ],
)
def test_a_bound_action_is_allowed_only_where_its_event_is(state: str, action: str, allowed: bool) -> None:
    issue = orders.allowed_now(state, action)
    assert (issue is None) == allowed
    if issue is not None:
        assert issue.code == "not-allowed-now" and f"'{state}'" in (issue.hint or "")


def test_the_hint_names_the_state_and_what_is_allowed_in_it() -> None:
    assert orders.allowed_now("draft", "take-payment") == Issue(
        code="not-allowed-now",
        hint="Not possible while the orders flow is in 'draft'; allowed now: `confirm-order`, `cancel-order`, "
        "`show-order`.",
    )
    assert orders.allowed_actions("paid") == ("show-order",)
    assert orders.flow_context("confirmed") == (
        '<flow name="orders" state="confirmed" allowed="take-payment cancel-order show-order"/>'
    )


@pytest.mark.parametrize(
    ("state", "action", "after"),
    [
        ("draft", "confirm-order", "confirmed"),
        ("confirmed", "take-payment", "paid"),
        ("confirmed", "cancel-order", "cancelled"),
        ("draft", "show-order", "draft"),
        ("paid", "show-order", "paid"),
    ],
)
def test_a_done_outcome_moves_the_flow_by_its_event(state: str, action: str, after: str) -> None:
    assert orders.after_done(state, action) == after


def test_a_done_outcome_where_its_event_is_not_allowed_is_an_illegal_transition() -> None:
    with pytest.raises(IllegalTransition):
        orders.after_done("paid", "cancel-order")
    with pytest.raises(ValueError, match="unknown state"):
        orders.allowed_now("shipped", "confirm-order")


@given(st.lists(st.sampled_from(list(orders.actions)), max_size=12))
def test_the_compiled_flow_agrees_with_the_declared_machine(actions: list[str]) -> None:
    declared, state = Order(), orders.flow.initial if orders.flow else ""
    for action in actions:
        event = orders.event_of(action)
        allowed = orders.allowed_now(state, action) is None
        if event is not None:
            try:
                declared.send(event)
            except TransitionNotAllowed:
                assert not allowed
                continue
        assert allowed
        state = orders.after_done(state, action)
        assert state == declared.current_state_value


def test_the_prompt_says_where_each_bound_action_is_allowed() -> None:
    described = orders.vocabulary
    assert described["take-payment"]["description"] == "Allowed only while the orders flow is in: confirmed."
    assert described["confirm-order"]["description"] == (
        "Confirm the order.\n\nAllowed only while the orders flow is in: draft."
    )
    assert described["show-order"]["description"] == ""
    assert orders.bound_actions == {
        "confirm": ["confirm-order"],
        "pay": ["take-payment"],
        "cancel": ["cancel-order"],
    }


class Nested(StateMachine):
    outer = State(initial=True)
    done = State(final=True)
    finish = outer.to(done, cond=lambda: True)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Domain("x").action(event="confirm")(confirm_order), ValueError, "has no flow"),
        (lambda: Domain("x", flow=Order).action(event="ship")(confirm_order), ValueError, "has no event 'ship'"),
        (lambda: Domain("x", flow=Nested), TypeError, "is not a bare flag name"),
        (lambda: Domain("x").allowed_now("draft", "a"), ValueError, "has no flow"),
    ],
)
def test_a_flow_that_cannot_work_is_refused_when_declared(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


@pytest.mark.parametrize("name", ["Order", "orders"])
def test_diagrams_draw_a_flow_with_its_actions_on_the_transitions(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flow = f"tests.runtime.test_flows:{name}"
    assert main(["diagrams", "--flow", flow, "--out", str(tmp_path), "--no-svg"]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["Order.dot", "Order.mmd"]
    mermaid = (tmp_path / "Order.mmd").read_text(encoding="utf-8")
    assert "    draft --> confirmed : confirm (confirm-order)" in mermaid
    assert "    confirmed --> cancelled : cancel (cancel-order)" in mermaid
    assert '"confirmed" -> "paid" [label="pay (take-payment)"]' in (tmp_path / "Order.dot").read_text()


@pytest.mark.parametrize("spec", ["tests.runtime.test_flows:confirm_order", "tests.no_such_module:Order", "Order"])
def test_diagrams_refuse_what_is_not_a_flow(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagrams", "--flow", spec, "--no-svg"]) == 2
    assert capsys.readouterr().err.startswith(f"dial-runtime diagrams: --flow {spec!r}: ")


@pytest.mark.anyio
async def test_the_documented_flow_runs_a_conversation_to_its_result() -> None:
    from ..docs.pages import DOCS, page_block
    from ..fakes import envelope, suggest

    namespace: dict[str, Any] = {}
    exec(compile(page_block(DOCS / "how-to" / "domains.md", "## Flows").code, "domains.md", "exec"), namespace)
    declared: Domain = namespace["orders"]
    assert declared.after_done("draft", "confirm-order") == "confirmed"
    order = '{"order_id": "o-1"}'
    agent = ScriptedAgent(
        [
            envelope(suggest("take-payment", order), suggest("confirm-order", order)),
            envelope(suggest("take-payment", order)),
        ]
    )
    conversation = Conversation(agent=agent, domain=declared, human=policy_human("accept"))
    assert conversation.flow_state == "draft"
    result = await conversation.say("confirm and pay")
    assert [(o.status, o.code) for o in result.outcomes] == [
        ("invalid", "not-allowed-now"),
        ("done", None),
        ("done", None),
    ]
    assert result.outcomes[0].hint == (
        "Not possible while the orders flow is in 'draft'; allowed now: `confirm-order`."
    )
    assert (result.status, conversation.flow_state, conversation.result) == ("ended", "paid", "paid")


def test_a_declaration_that_fails_binds_nothing() -> None:
    domain = Domain("x", flow=Order)

    def spread(*order_ids: str) -> None: ...

    with pytest.raises(TypeError, match="cannot be given by name"):
        domain.action(event="confirm")(spread)
    assert (domain.bound_actions, dict(domain.actions)) == ({}, {})
