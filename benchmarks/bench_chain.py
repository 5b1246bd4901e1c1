"""Hash-chain benchmarks: prints one JSON line.

(a) What the chain costs a turn: bench_store's scenario (d) (a conversation opened, one ``say`` whose suggestion
the person defers, then ``decide(..., Accept())``) on two SQLite stores side by side, one chaining its entries
and one not (``SQLiteStore(..., chain=False)``), each on a database of its own. The two take turns conversation by
conversation (in alternating order), so that whatever else the machine does weighs on both alike; the figures
are microseconds of wall time and of this process's CPU time per agent turn over every round, and
``chain_cost_pct`` is the chained store's time over the other's, less one. ``round_median_pct`` is the median of
the rounds' own ratios, a check on the first.

(b) What verifying costs: ``verify_store`` over 100,000 stored entries of one conversation in a SQLite store (the
demo conversation's entries again and again, renumbered; appended 1,000 at a time, so chained as a store chains
them), in seconds: reading the rows (``rows_s``), hashing them (``verify_log_s``) and both (``verify_store_s``),
the best of a few runs. ``tampered_s``: the same log with one entry edited near its middle, where verification
also works out how the entry fails (and ``tampered_found`` says it did).

``--smoke`` runs tiny sizes, for CI: it checks that the benchmark runs, not the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio
from bench_store import defer_then_decide

from dial_runtime import LogEntry
from dial_runtime.stores import SQLiteStore, StorePort
from dial_runtime.stores.chain import ChainReport, StoredRow, verify_log, verify_store
from dial_runtime.stores.jsonl import import_jsonl

DEMO = Path(__file__).resolve().parents[1] / "tests" / "recordings" / "demo.jsonl"


def turn_pass(
    stores: dict[str, Callable[[], StorePort]], count: int, flip: bool
) -> dict[str, tuple[float, float, int]]:
    """Seconds of wall time and of CPU time, and the agent turns, per store over ``count`` scenario (d)
    conversations on each: one on each store in turn (in the other order every other time, and ``flip`` starts
    with the other), so that whatever else the machine does weighs on both alike."""

    async def work() -> dict[str, tuple[float, float, int]]:
        opened = {name: make() for name, make in stores.items()}
        taken = {name: (0.0, 0.0, 0) for name in stores}
        try:
            for store in opened.values():
                await store.conversations()  # connect before the clock starts
            for n in range(count):
                names = list(opened)
                if (n % 2 == 1) != flip:
                    names.reverse()
                for name in names:
                    wall, cpu = time.perf_counter(), time.process_time()
                    turns = await defer_then_decide(opened[name], f"d-{n}")
                    spent = taken[name]
                    taken[name] = (
                        spent[0] + time.perf_counter() - wall,
                        spent[1] + time.process_time() - cpu,
                        spent[2] + turns,
                    )
            return taken
        finally:
            for store in opened.values():
                await store.aclose()

    return trio.run(work)


def turn_cost(count: int, rounds: int) -> dict[str, float]:
    """Scenario (a): microseconds per turn with the chain on and off, interleaved, and what the chain adds."""
    with tempfile.TemporaryDirectory(prefix="dial-bench-") as name:
        folder = Path(name)
        passes = itertools.count()
        stores: dict[str, Callable[[], StorePort]] = {
            "chain": lambda: SQLiteStore(folder / f"on-{next(passes)}.db"),
            "no_chain": lambda: SQLiteStore(folder / f"off-{next(passes)}.db", chain=False),
        }
        turn_pass(stores, 10, False)  # warm up
        totals = {name: [0.0, 0.0, 0] for name in stores}
        ratios = []
        for round_ in range(rounds):
            taken = turn_pass(stores, count, round_ % 2 == 1)
            ratios.append((taken["chain"][0] / taken["chain"][2]) / (taken["no_chain"][0] / taken["no_chain"][2]))
            for name, (wall, cpu, turns) in taken.items():
                totals[name][0] += wall
                totals[name][1] += cpu
                totals[name][2] += turns
    per_turn = {name: (wall / turns, cpu / turns) for name, (wall, cpu, turns) in totals.items()}
    on, off = per_turn["chain"], per_turn["no_chain"]
    return {
        "conversations": count * rounds,
        "chain_us_per_turn": round(on[0] * 1e6, 1),
        "no_chain_us_per_turn": round(off[0] * 1e6, 1),
        "chain_cost_pct": round((on[0] / off[0] - 1) * 100, 2),
        "round_median_pct": round((statistics.median(ratios) - 1) * 100, 2),
        "chain_cpu_us_per_turn": round(on[1] * 1e6, 1),
        "no_chain_cpu_us_per_turn": round(off[1] * 1e6, 1),
        "chain_cpu_cost_pct": round((on[1] / off[1] - 1) * 100, 2),
    }


def long_log(size: int) -> list[LogEntry]:
    """``size`` entries: the demo conversation's, again and again, numbered 1..size."""
    with DEMO.open(encoding="utf-8") as file:
        _, demo = import_jsonl(file)
    return [msgspec.structs.replace(demo[n % len(demo)], seq=n + 1) for n in range(size)]


def best_of(runs: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return min(times)


def verify_cost(size: int, runs: int) -> dict[str, float | int | bool | str]:
    """Scenario (b): seconds to read and verify one conversation of ``size`` stored entries."""
    entries = long_log(size)
    with tempfile.TemporaryDirectory(prefix="dial-bench-") as name:
        path = Path(name) / "long.db"

        async def fill() -> None:
            store = SQLiteStore(path)
            try:
                for start in range(0, size, 1000):
                    await store.append("long", entries[start : start + 1000], expected_seq=start)
            finally:
                await store.aclose()

        trio.run(fill)

        async def rows() -> list[StoredRow]:
            store = SQLiteStore(path, create=False)
            try:
                return await store.rows("long")
            finally:
                await store.aclose()

        async def whole() -> ChainReport:
            store = SQLiteStore(path, create=False)
            try:
                return await verify_store(store)
            finally:
                await store.aclose()

        stored = trio.run(rows)
        results: dict[str, float | int | bool | str] = {
            "entries": size,
            "ok": verify_log(stored).ok,
            "rows_s": round(best_of(runs, lambda: trio.run(rows)), 3),
            "verify_log_s": round(best_of(runs, lambda: verify_log(stored)), 3),
            "verify_store_s": round(best_of(runs, lambda: trio.run(whole)), 3),
        }
        connection = sqlite3.connect(path)
        with connection:
            connection.execute(
                "UPDATE dial_log SET entry = replace(entry, 'buy milk', 'buy wine') "
                "WHERE seq = (SELECT min(seq) FROM dial_log WHERE seq >= ? AND entry LIKE '%buy milk%')",
                (size // 2,),
            )
        connection.close()
        results["tampered_s"] = round(best_of(1, lambda: trio.run(whole)), 3)
        (broken,) = trio.run(whole).broken
        results["tampered_found"] = broken.broken is not None and broken.broken.kind == "edited"
        results["tampered_said"] = broken.summary()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the benchmark runs")
    smoke = parser.parse_args().smoke
    load = os.getloadavg()[0]  # other work on the machine inflates every time below
    turns = turn_cost(*((10, 2) if smoke else (300, 9)))
    verified = verify_cost(*((2_000, 1) if smoke else (100_000, 3)))
    print(
        json.dumps(
            {
                "benchmark": "chain",
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "smoke": smoke,
                "load_average_1m": round(load, 2),
                "a": turns,
                "b": verified,
                "targets": {"chain_cost_pct": 5.0, "verify_store_s": 2.0},
            }
        )
    )
    if not (verified["ok"] and verified["tampered_found"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
