"""Typed actions whose payload is a pydantic model (pydantic is in the test extra; the toolkit never needs it)."""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from dial_runtime import Domain, Issue
from dial_runtime.domains import INVALID_PAYLOAD

pydantic = pytest.importorskip("pydantic")


class Line(pydantic.BaseModel):
    sku: Annotated[str, pydantic.Field(min_length=1)]
    quantity: Annotated[int, pydantic.Field(ge=1)] = 1


class Order(pydantic.BaseModel):
    """An order."""

    customer: str
    lines: list[Line]


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore")
    name: str


def orders() -> Domain:
    domain = Domain("orders")

    @domain.action(preview="Order for {customer}")
    def place(order: Order) -> Order:
        return order

    @domain.action
    def tag(tag: Loose) -> str:
        return tag.name

    return domain


ORDERS = orders()


@pytest.mark.parametrize(
    ("action", "payload", "issue"),
    [
        ("place", {"customer": "ada", "lines": [{"sku": "a"}]}, None),
        (
            "place",
            {"lines": []},
            Issue(code=INVALID_PAYLOAD, field="customer", hint="Give `customer`: it is required."),
        ),
        (
            "place",
            {"customer": "ada", "lines": [], "x": 1},
            Issue(code=INVALID_PAYLOAD, field="x", hint="Remove `x`: it is not a field."),
        ),
        (
            "place",
            {"customer": 1, "lines": []},
            Issue(code=INVALID_PAYLOAD, field="customer", hint="Input should be a valid string."),
        ),
        (
            "place",
            {"customer": "ada", "lines": [{"sku": "a"}, {"sku": "b", "quantity": 0}]},
            Issue(
                code=INVALID_PAYLOAD, field="lines[1].quantity", hint="Input should be greater than or equal to 1."
            ),
        ),
        ("place", ["ada"], Issue(code=INVALID_PAYLOAD, hint="The payload must be a JSON object.")),
        ("tag", {"name": "a", "other": 1}, None),
    ],
)
def test_a_pydantic_payload_is_validated_strictly_with_precise_fields(
    action: str, payload: Any, issue: Issue | None
) -> None:
    assert ORDERS.validate(action, payload) == issue


def test_a_pydantic_payload_runs_as_the_model_and_comes_back_as_json() -> None:
    assert ORDERS.run("place", {"customer": "ada", "lines": [{"sku": "a"}]}) == {
        "customer": "ada",
        "lines": [{"sku": "a", "quantity": 1}],
    }
    assert ORDERS.preview("place", {"customer": "ada", "lines": []}) == "Order for ada"
    assert ORDERS.vocabulary["place"]["example"] == {"customer": "example", "lines": [{"sku": "example"}]}
    assert ORDERS.definitions["place"].payload.schema == Order.model_json_schema()
