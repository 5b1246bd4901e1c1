"""Typed-domain benchmark: what validating a suggestion's payload costs; prints one JSON line.

- ``validate_5_fields_us``: microseconds for ``Domain.validate`` of a valid 5-field payload (two constrained
  strings, a bounded int, a float, a list of strings) declared as keyword parameters: msgspec's ``convert`` into
  the action's Struct, strict. Target: at most 10 us per suggestion.
- ``refuse_5_fields_us``: the same for a payload refused at its last field (the error message is turned into an
  ``Issue``).
- ``json_schema_5_fields_us``: the same payload validated against the equivalent JSON Schema (``jsonschema``, as
  MCP tools are).

Each figure is the best average CPU time over several rounds. ``--smoke`` runs few iterations, for CI.
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated, Any

import msgspec
from bench_parse import per_call_us  # this script's folder is on the path

from dial_runtime import Domain

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=60)]


def domain() -> Domain:
    shop = Domain("shop")

    @shop.action
    def add_item(
        name: Name,
        category: Name,
        quantity: Annotated[int, msgspec.Meta(ge=1, le=99)],
        price: float,
        tags: list[str],
    ) -> None: ...

    @shop.action(schema=shop.schema("add-item"))
    def add_item_by_schema(payload: dict[str, Any]) -> None: ...

    return shop


PAYLOAD = {"name": "milk", "category": "dairy", "quantity": 2, "price": 1.25, "tags": ["fresh", "local"]}
REFUSED = {**PAYLOAD, "tags": ["fresh", 3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run that checks the benchmark works")
    args = parser.parse_args()
    calls, rounds = (200, 2) if args.smoke else (20_000, 7)
    shop = domain()
    assert shop.validate("add-item", PAYLOAD) is None
    assert shop.validate("add-item", REFUSED) is not None
    assert shop.validate("add-item-by-schema", PAYLOAD) is None
    figures = {
        "validate_5_fields_us": per_call_us(lambda: shop.validate("add-item", PAYLOAD), calls, rounds),
        "refuse_5_fields_us": per_call_us(lambda: shop.validate("add-item", REFUSED), calls, rounds),
        "json_schema_5_fields_us": per_call_us(
            lambda: shop.validate("add-item-by-schema", PAYLOAD), max(calls // 10, 20), rounds
        ),
    }
    print(json.dumps({"benchmark": "domain", "smoke": args.smoke, **{k: round(v, 2) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
