"""Typed-domain benchmark: what validating a suggestion's payload costs; prints one JSON line.

- ``validate_5_fields_us``: microseconds for ``Domain.validate`` of a valid 5-field payload (two constrained
  strings, a bounded int, a float, a list of strings) declared as keyword parameters: msgspec's ``convert`` into
  the action's Struct, strict. Target: at most 10 us per suggestion.
- ``refuse_5_fields_us``: the same for a payload refused at its last field (the error message is turned into an
  ``Issue``).
- ``json_schema_5_fields_us``: the same payload validated against the equivalent JSON Schema (``jsonschema``, as
  MCP tools are).
- ``flow_check_us``: the flow's check of one suggestion (``FlowRules.allowed_now`` of an allowed bound action);
  ``flow_refusal_us``: the same for one not allowed now (the hint names the allowed actions).
- ``core_call_us`` and ``core_call_flow_us``: one whole call driven through the conversation core with no event
  loop (a reply with one 5-field suggestion, validated, accepted and run, then an acknowledge: 2 turns), for the
  domain without and with a flow (checked at review and at the accept, moved by the done outcome, sent with both
  turns); ``flow_overhead_us`` is their difference.
- ``notes_domain_bytes`` and ``notes_domain_us``: the memory one more ``NotesDomain()`` holds (tracemalloc, the
  mean over many kept alive) and the time it takes to build, as ``serve --domain
  dial_runtime.demo:notes_by_conversation`` builds one per conversation. Its actions compile once per process
  and every instance shares that; target: at most 3,000 bytes per instance.

Each figure is the best average CPU time over several rounds. ``--smoke`` runs few iterations, for CI.
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from typing import Annotated, Any

import msgspec
from bench_parse import per_call_us  # this script's folder is on the path
from statemachine import State, StateMachine

from dial_runtime import Accept, Domain
from dial_runtime.runtime.core import ConversationCore
from dial_runtime.runtime.effects import (
    Answer,
    Consult,
    ConsultRules,
    GetContext,
    LookUp,
    Ran,
    Replied,
    Reviewed,
    RunAction,
    Send,
)

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=60)]


class Basket(StateMachine):
    """A basket that goes on filling: every state allows adding an item (a flow the benchmark can repeat)."""

    filling = State(initial=True)
    full = State()
    checked_out = State(final=True)

    add = filling.to(full) | full.to(full)
    check_out = full.to(checked_out)


def domain(flow: type[StateMachine] | None = None) -> Domain:
    shop = Domain("shop", flow=flow)

    @shop.action(event="add" if flow is not None else None)
    def add_item(
        name: Name,
        category: Name,
        quantity: Annotated[int, msgspec.Meta(ge=1, le=99)],
        price: float,
        tags: list[str],
    ) -> None: ...

    @shop.action(schema=shop.schema("add-item"))
    def add_item_by_schema(payload: dict[str, Any]) -> None: ...

    @shop.action(event="check_out" if flow is not None else None)
    def check_out() -> None: ...

    return shop


REPLY = (
    '<dial><dial-suggest action="add-item">Add milk<dial-payload>{"name": "milk", "category": "dairy", '
    '"quantity": 2, "price": 1.25, "tags": ["fresh"]}</dial-payload></dial-suggest></dial>'
)
ACKNOWLEDGE = '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>'


def core_call(shop: Domain) -> None:
    """One call through the core, every effect answered from ``shop`` as the driver would."""
    core = ConversationCore(flow=shop.flow_rules)
    replies = [REPLY, ACKNOWLEDGE]
    call = core.say("add milk")
    value: object = None
    while True:
        try:
            effect = call.send(value)
        except StopIteration:
            return
        kind = type(effect)
        if kind is GetContext:
            value = None
        elif kind is Send:
            value = Replied(replies.pop(0))
        elif kind is LookUp:
            value = shop.actions.get(effect.action)  # type: ignore[attr-defined]
        elif kind is ConsultRules:
            value = None  # no rules for whether to ask
        elif kind is Consult:
            value = Answer(Accept())
        elif kind is RunAction:
            value = Ran(shop.run(effect.action, effect.payload))  # type: ignore[attr-defined]
        else:  # Review
            issue = shop.validate(effect.action, effect.payload)  # type: ignore[attr-defined]
            shown = issue is None and effect.preview  # type: ignore[attr-defined]
            value = Reviewed(issue, shop.preview(effect.action, effect.payload) if shown else "")  # type: ignore[attr-defined]


PAYLOAD = {"name": "milk", "category": "dairy", "quantity": 2, "price": 1.25, "tags": ["fresh", "local"]}
REFUSED = {**PAYLOAD, "tags": ["fresh", 3]}


def notes_domain_bytes(count: int) -> float:
    """The mean bytes each of ``count`` ``NotesDomain`` instances kept alive holds (the first one built before)."""
    from dial_runtime.demo import NotesDomain

    NotesDomain()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = [NotesDomain() for _ in range(count)]
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(kept) == count
    return held / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run that checks the benchmark works")
    args = parser.parse_args()
    calls, rounds = (200, 2) if args.smoke else (20_000, 7)
    shop = domain()
    assert shop.validate("add-item", PAYLOAD) is None
    assert shop.validate("add-item", REFUSED) is not None
    assert shop.validate("add-item-by-schema", PAYLOAD) is None
    flowing = domain(Basket)
    rules = flowing.flow_rules
    assert rules is not None and rules.allowed_now("filling", "check-out") is not None
    figures = {
        "validate_5_fields_us": per_call_us(lambda: shop.validate("add-item", PAYLOAD), calls, rounds),
        "refuse_5_fields_us": per_call_us(lambda: shop.validate("add-item", REFUSED), calls, rounds),
        "json_schema_5_fields_us": per_call_us(
            lambda: shop.validate("add-item-by-schema", PAYLOAD), max(calls // 10, 20), rounds
        ),
        "flow_check_us": per_call_us(lambda: rules.allowed_now("filling", "add-item"), calls, rounds),
        "flow_refusal_us": per_call_us(lambda: rules.allowed_now("filling", "check-out"), calls, rounds),
        "core_call_us": per_call_us(lambda: core_call(shop), max(calls // 10, 20), rounds),
        "core_call_flow_us": per_call_us(lambda: core_call(flowing), max(calls // 10, 20), rounds),
    }
    figures["flow_overhead_us"] = figures["core_call_flow_us"] - figures["core_call_us"]
    from dial_runtime.demo import NotesDomain

    figures["notes_domain_us"] = per_call_us(NotesDomain, max(calls // 20, 10), rounds)
    figures["notes_domain_bytes"] = notes_domain_bytes(50 if args.smoke else 2_000)
    print(json.dumps({"benchmark": "domain", "smoke": args.smoke, **{k: round(v, 2) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
