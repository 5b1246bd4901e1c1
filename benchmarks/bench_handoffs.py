"""How many times one accepted suggestion passes between the package's modules: prints one JSON line.

The reference conversation of ``bench_runtime.py`` (one ``say``: a suggestion the person accepts, its run, the
agent's acknowledgement; two turns) is held once to warm up, then again under a profile hook that notes, at every
Python call and return, which of the package's modules is executing. A hand-off is a change from one package
module to another; frames of other libraries (trio, msgspec, the standard library) are skipped, so a call from
the driver into trio and back counts nothing, and a call from the core into the fold and back counts two. Reports
the hand-offs, the modules involved, the events logged, and the pairs of modules that hand off most.

``layer_handoffs`` counts the same way between the layers the package's folders draw (``language``,
``statemachines``, ``runtime``: the core and its fold, ``views``, ``driver``, ``domains``, ...): how often the
trail leaves one folder for another, which is what a reader following it with "go to definition" pays for. Inside
``runtime`` the core hands each event to the fold and back, once per event, by design (the one place a rule
fires), and that is counted by ``handoffs``, not by ``layer_handoffs``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from types import FrameType
from typing import Any

import trio
from bench_runtime import ACKNOWLEDGE_REPLY, SUGGESTION_REPLY, conversation

PACKAGE = "dial_runtime"


def count(top: int) -> dict[str, Any]:
    """Hold the reference conversation under the hook and count its hand-offs (``top``: pairs to list)."""
    trio.run(conversation([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]).say, "add a note: buy milk")  # warm up
    held = conversation([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY])
    pairs: collections.Counter[tuple[str, str]] = collections.Counter()
    layers: collections.Counter[tuple[str, str]] = collections.Counter()
    modules: set[str] = set()
    current: list[str | None] = [None]

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return"):
            return
        # On a return the caller's frame executes next; on a call, the callee's.
        where = frame if event == "call" else frame.f_back
        name = where.f_globals.get("__name__", "") if where is not None else ""
        if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            return
        modules.add(name)
        before = current[0]
        if before is not None and before != name:
            pairs[(before, name)] += 1
            if _layer(before) != _layer(name):
                layers[(_layer(before), _layer(name))] += 1
        current[0] = name

    sys.setprofile(hook)
    try:
        trio.run(held.say, "add a note: buy milk")
    finally:
        sys.setprofile(None)
    events = len(held.log)
    return {
        "benchmark": "handoffs",
        "handoffs": sum(pairs.values()),
        "layer_handoffs": sum(layers.values()),
        "modules": len(modules),
        "events": events,
        "busiest": [
            {"from": a.removeprefix(PACKAGE + "."), "to": b.removeprefix(PACKAGE + "."), "times": n}
            for (a, b), n in pairs.most_common(top)
        ],
        "busiest_layers": [{"from": a, "to": b, "times": n} for (a, b), n in layers.most_common(top)],
    }


def _layer(module: str) -> str:
    """The folder of the package that ``module`` is in (the package itself for a top-level module)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else PACKAGE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top", type=int, default=8, help="the pairs of modules to list (default 8)")
    parser.add_argument("--smoke", action="store_true", help="accepted for CI's smoke run: the count is small")
    print(json.dumps(count(parser.parse_args().top)))


if __name__ == "__main__":
    main()
