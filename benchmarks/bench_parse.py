"""Parser benchmarks: prints one JSON line.

- ``typical_reply_us``: microseconds to parse (and validate against the lenient XSD) a typical reply, a short
  sentence and an envelope with one ``dial-suggest`` and a ``dial-declare`` with a bare JSON body; the best
  average of several rounds. ``extract_prose_us``: the same for :func:`extract_prose`.
- ``*_ratio_*``: time for an input of size 2n over time for size n (1.0 is free, 2.0 is linear), best of several
  runs each: prose around an envelope, an envelope of many informs, unclosed tags, nested elements, and a text
  full of raw ``&`` and ``<`` that takes the repair path, and one element with many attributes.

Times are CPU times of this process, so other processes on the machine disturb them less than wall time.

``--smoke`` runs small sizes and few iterations, for CI: it checks that the benchmark runs, not the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dial_runtime.language.parser import extract_prose, parse

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from tests.language.test_parser_hardening import attributes, informs, nested, prose, raw_markup, unclosed

TYPICAL_REPLY = (
    "Sure, I can add that to your list.\n<dial>\n"
    '  <dial-suggest action="add-item">Add "buy milk" to the list</dial-suggest>\n'
    '  <dial-declare context-key="add-item">{"text":"buy milk"}</dial-declare>\n'
    "</dial>"
)


def per_call_us(function: Callable[[], object], calls: int, rounds: int) -> float:
    """Best average CPU time over ``rounds`` rounds of ``calls`` calls, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            function()
        best = min(best, (time.process_time() - started) / calls)
    return best * 1e6


def cpu_seconds(reply: str) -> float:
    started = time.process_time()
    parse(reply)
    return time.process_time() - started


def ratio(make: Callable[[int], str], size: int, repetitions: int) -> float:
    """Time for ``make(2 * size)`` over time for ``make(size)``: the least of interleaved runs of each.

    The cyclic garbage collector is paused meanwhile, since its passes depend on everything else in the process.
    """
    small, large = make(size), make(2 * size)
    gc.disable()
    try:
        best_small = cpu_seconds(small)
        best_large = float("inf")
        for _ in range(repetitions):
            best_large = min(best_large, cpu_seconds(large))
            best_small = min(best_small, cpu_seconds(small))
    finally:
        gc.enable()
    return best_large / best_small


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--smoke", action="store_true", help="small sizes and few iterations, for CI")
    smoke = options.parse_args().smoke
    scale = 100 if smoke else 1
    calls, rounds, repetitions = (200, 3, 1) if smoke else (20_000, 15, 9)
    parse(TYPICAL_REPLY)
    figures = {
        "typical_reply_us": round(per_call_us(lambda: parse(TYPICAL_REPLY), calls, rounds), 2),
        "extract_prose_us": round(per_call_us(lambda: extract_prose(TYPICAL_REPLY), calls, rounds), 2),
        "prose_ratio_10mb_vs_5mb": round(ratio(prose, 5_000_000 // scale, repetitions), 2),
        "envelope_ratio_4mb_vs_2mb": round(ratio(informs, 2_000_000 // scale, repetitions), 2),
        "unclosed_ratio_100k_vs_50k": round(ratio(unclosed, 50_000 // scale, repetitions), 2),
        "nested_ratio_100k_vs_50k": round(ratio(nested, 50_000 // scale, repetitions), 2),
        "raw_markup_ratio_40k_vs_20k": round(ratio(raw_markup, 20_000 // scale, repetitions), 2),
        "attributes_ratio_20k_vs_10k": round(ratio(attributes, 10_000 // scale, repetitions), 2),
        "smoke": smoke,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
