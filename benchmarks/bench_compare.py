"""Scenario (a) of ``bench_runtime.py`` for a base commit and the working tree, side by side: prints one JSON line.

The base commit's package is exported (``git archive``) into a temporary directory; both sides run the same
scenario, this checkout's ``bench_runtime.py``, in fresh interpreters. Each round runs the base once and the
working tree once, back to back, so both see the machine in the same state: with the same string-hash seed (a new
one each round: where a set or dict puts its keys changes the time by a few percent), the base first in one round
and second in the next, and each run keeps the best of :data:`REPEATS` passes. The report gives each side's best
time, the median of the rounds' ratios (new over base) and their quartiles: on a shared machine a round's ratio
can swing by a fifth, and the quartiles say how far to trust the median. ``--instructions`` also counts each
side's instructions per turn with valgrind's callgrind: the difference between ``--conversations`` and one
conversation, over their turns, with hash randomisation off, so the figure does not swing with the machine's load
as wall time does.

``--smoke`` runs small sizes and compares the working tree with ``HEAD`` unless ``--base`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
CHECKOUT = BENCHMARKS.parent
#: Passes of the scenario in each run; the run reports its best.
REPEATS = 3

#: Runs scenario (a) with the package found at argv[1]: prints microseconds per turn.
SCENARIO = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import bench_runtime
bench_runtime.ROUNDS = int(sys.argv[4])
print(bench_runtime.scenario_a(int(sys.argv[3])))
"""


class CompareError(Exception):
    """The comparison cannot run (an unknown commit, no git, no valgrind)."""


def export(base: str, into: Path) -> Path:
    """The base commit's ``dial_runtime`` package, written under ``into``; returns the directory holding it."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(CHECKOUT), "archive", "--format=tar", base, "dial_runtime"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except FileNotFoundError:
        raise CompareError("git is not installed") from None
    except subprocess.CalledProcessError as error:
        why = error.stderr.decode(errors="replace").strip().splitlines()
        raise CompareError(f"cannot export {base!r}: {why[-1] if why else 'git archive failed'}") from None
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12 and later
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # git's own archive of this repository
    return into


def scenario(tree: Path, conversations: int, rounds: int) -> list[str]:
    """The command that runs scenario (a) with the package in ``tree``."""
    return [sys.executable, "-c", SCENARIO, str(tree), str(BENCHMARKS), str(conversations), str(rounds)]


def run_scenario(tree: Path, conversations: int, rounds: int, seed: int) -> float:
    """Microseconds per turn of scenario (a) with the package in ``tree`` (best of ``rounds``), strings hashed
    with ``seed``."""
    out = subprocess.run(
        scenario(tree, conversations, rounds),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
    ).stdout
    return float(out.strip().splitlines()[-1])


def pair(base_tree: Path, new_tree: Path, conversations: int, number: int) -> tuple[float, float]:
    """Round ``number``: (base, new) microseconds per turn, with one hash seed; the base runs first in even
    rounds, second in odd ones."""
    seed = random.randrange(1, 2**32)
    if number % 2:
        new = run_scenario(new_tree, conversations, REPEATS, seed)
        return run_scenario(base_tree, conversations, REPEATS, seed), new
    base = run_scenario(base_tree, conversations, REPEATS, seed)
    return base, run_scenario(new_tree, conversations, REPEATS, seed)


def quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles: how far the rounds' ratios spread on this machine at this time."""
    if len(values) < 2:
        return values[0], values[0]
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return first, third


def count_instructions(tree: Path, conversations: int, scratch: Path) -> int:
    """Instructions per turn of scenario (a) with the package in ``tree``: callgrind's totals for
    ``conversations`` conversations minus one conversation's, over their two turns each."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise CompareError("--instructions needs valgrind (Debian's valgrind package)")
    totals = []
    for count in (1, conversations):
        output = scratch / f"callgrind.{tree.name}.{count}"
        subprocess.run(
            [valgrind, "--tool=callgrind", f"--callgrind-out-file={output}", *scenario(tree, count, 1)],
            capture_output=True,
            check=True,
            timeout=1800,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        summary = next(
            line for line in output.read_text().splitlines() if line.startswith(("summary:", "totals:"))
        )
        totals.append(int(summary.split()[1]))
    return (totals[1] - totals[0]) // (2 * (conversations - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="the commit to compare with (default: HEAD with --smoke)")
    parser.add_argument("--rounds", type=int, default=11, help="interleaved pairs of runs (default: 11)")
    parser.add_argument("--conversations", type=int, default=1000, help="conversations per run (default: 1000)")
    parser.add_argument("--instructions", action="store_true", help="also count instructions with callgrind")
    parser.add_argument("--smoke", action="store_true", help="small sizes, to check the benchmark runs")
    options = parser.parse_args()
    if options.smoke:
        options.rounds, options.conversations = 2, 50
        options.base = options.base or "HEAD"
    if not options.base:
        parser.error("--base is required (a commit, e.g. a tag or a hash)")
    try:
        with tempfile.TemporaryDirectory(prefix="dial-compare-") as scratch:
            base_tree = export(options.base, Path(scratch) / "base")
            new_tree = CHECKOUT
            pairs = [pair(base_tree, new_tree, options.conversations, number) for number in range(options.rounds)]
            ratios = [new / base for base, new in pairs]
            report: dict[str, object] = {
                "benchmark": "compare",
                "python": platform.python_version(),
                "smoke": options.smoke,
                "base": options.base,
                "rounds": options.rounds,
                "a_base_us_per_turn": round(min(base for base, _ in pairs), 1),
                "a_new_us_per_turn": round(min(new for _, new in pairs), 1),
                "a_ratio_median_of_pairs": round(statistics.median(ratios), 3),
                "a_ratio_quartiles": [round(q, 3) for q in quartiles(ratios)],
                "target_ratio": 1.10,
            }
            if options.instructions:
                count = 21 if options.smoke else 401
                base_count = count_instructions(base_tree, count, Path(scratch))
                new_count = count_instructions(new_tree, count, Path(scratch))
                report["a_base_instructions_per_turn"] = base_count
                report["a_new_instructions_per_turn"] = new_count
                report["a_instructions_ratio"] = round(new_count / base_count, 3)
    except CompareError as error:
        sys.exit(f"bench_compare: {error}")
    except subprocess.CalledProcessError as error:
        stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr or ""
        lines = stderr.strip().splitlines()
        sys.exit(f"bench_compare: a run failed: {lines[-1] if lines else error}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
