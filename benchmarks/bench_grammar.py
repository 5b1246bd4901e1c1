"""Grammar benchmark: prints one JSON line.

Measured: the time :func:`domain_grammar` takes to write the GBNF grammar of a domain with 20 actions whose
payload schemas are msgspec-generated (a nested struct, a list, an optional field, a literal), and the size of
that grammar. A ``ChatAgent`` writes it once, when it is made, so this is a one-off cost per agent (target <= 20
ms). The first call also reads the speech acts from the XSD (xmlschema), reported apart. ``--smoke`` runs 3
times instead of 50, for CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Annotated, Any, Literal

import msgspec

from dial_runtime import ActionSpec
from dial_runtime.llm.grammar import domain_grammar


class Line(msgspec.Struct):
    sku: Annotated[str, msgspec.Meta(min_length=1, max_length=12)]
    quantity: int


class Payload(msgspec.Struct):
    lines: Annotated[list[Line], msgspec.Meta(min_length=1, max_length=5)]
    priority: Literal["low", "normal", "high"]
    note: str | None = None


class Shop:
    """Twenty actions, each with a realistic payload schema."""

    def __init__(self, count: int) -> None:
        schema = msgspec.json.schema(Payload)
        self.actions = {f"action-{index}": ActionSpec(mutates=True) for index in range(count)}
        self.vocabulary: dict[str, Any] = {name: {"schema": schema} for name in self.actions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a quick run for CI")
    runs = 3 if parser.parse_args().smoke else 50
    domain = Shop(20)
    started = time.perf_counter()
    domain_grammar(domain)
    first = time.perf_counter() - started
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        grammar = domain_grammar(domain)
        timings.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "benchmark": "grammar",
                "actions": 20,
                "runs": runs,
                "median_ms": round(statistics.median(timings) * 1000, 3),
                "worst_ms": round(max(timings) * 1000, 3),
                "first_call_ms": round(first * 1000, 1),
                "gbnf_bytes": len(grammar.gbnf.encode()),
                "target_ms": 20,
            }
        )
    )


if __name__ == "__main__":
    main()
