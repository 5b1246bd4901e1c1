"""Scenario (a) of ``bench_runtime.py`` for a base commit and the working tree, side by side: prints one JSON line.

The base commit's package is exported (``git archive``) into a temporary directory; both sides run the same
scenario, this checkout's ``bench_runtime.py``. Each round starts one interpreter per side, both with the same
string-hash seed (a new one each round: where a set or dict puts its keys moves the time by a few percent), and
has them take ``--passes`` passes in turn, each over fresh conversations, the base first in one pass and second
in the next. A pass takes a fifth of a second, so the two passes of a pair see the machine in the same state even
when its speed swings within seconds, as a shared machine's does. The report gives each side's best pass, the
median of the pairs' ratios (new over base) and their quartiles, which say how far to trust the median.
``--instructions`` also counts, per turn, each side's instructions, first-level cache misses (data and
instructions) and mispredicted branches with valgrind's cachegrind: the difference between ``--conversations``
and one conversation, over their turns, with hash randomisation off, so the figures do not swing with the
machine's load as wall time does. Instructions alone understate what a change costs in time: a miss or a
mispredicted branch costs the time of many instructions, and Python code that touches more objects and more
bytecode (more functions, more calls) misses more per instruction.

``--public`` measures scenario (a) as a program that uses the package pays for it: through the public API only
(``ScriptedAgent``, ``policy_human("accept")``, a plain domain class), a new ``Conversation`` built inside the
timed loop for every ``say``, the garbage collector left as the program leaves it, and each side's hash seed
drawn at random by its interpreter. Every run is an interpreter of its own, with the side's checkout first on
``PYTHONPATH``, that takes ``--passes`` passes of ``--conversations`` conversations and reports its best; the
sides alternate who runs first over ``--rounds`` pairs (defaults: 5 passes of 300 conversations, 6 pairs).
``--instructions`` with ``--public`` counts the same program's instructions per turn, the building included.

``--smoke`` runs small sizes and compares the working tree with ``HEAD`` unless ``--base`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import select
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
CHECKOUT = BENCHMARKS.parent
#: Seconds a side may take for one pass before the comparison gives up on it.
PASS_TIMEOUT = 300

#: Serves passes of scenario (a) with the package found at argv[1]: each line read runs one pass over fresh
#: conversations and prints its microseconds per turn.
PASSES = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import bench_runtime
bench_runtime.ROUNDS = 1
for _ in sys.stdin:
    print(bench_runtime.scenario_a(int(sys.argv[3])), flush=True)
"""


#: A program as a user writes it, on the package that ``PYTHONPATH`` finds first: argv[1] passes of argv[2]
#: conversations, each built inside the timed loop and told one thing; prints the best pass's microseconds per
#: turn. No warm-up pass and no collection between passes: the best pass is the measure.
PUBLIC = """
import sys
import time
import trio
from dial_runtime import ActionSpec, Conversation, ScriptedAgent, policy_human

SUGGESTION = (
    'Sure.\\n<dial>\\n  <dial-suggest action="add-note">Add "buy milk"</dial-suggest>\\n'
    '  <dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare>\\n</dial>'
)
ACKNOWLEDGE = '<dial>\\n  <dial-acknowledge of="sg-1">Added.</dial-acknowledge>\\n</dial>'


class Notes:
    actions = {"add-note": ActionSpec(mutates=True)}

    def __init__(self):
        self.count = 0

    def validate(self, action, payload):
        return {"ok": True} if isinstance(payload, dict) and payload.get("text") else {"ok": False, "code": "x"}

    def preview(self, action, payload):
        return f"Add the note '{payload['text']}'"

    def run(self, action, payload):
        self.count += 1
        return {"count": self.count}

    def context(self):
        return f'<context notes="{self.count}"/>'


async def talk(count):
    for _ in range(count):
        conversation = Conversation(
            agent=ScriptedAgent([SUGGESTION, ACKNOWLEDGE]), domain=Notes(), human=policy_human("accept")
        )
        result = await conversation.say("add a note: buy milk")
        assert result.turns == 2 and result.outcomes[0].status == "done"


def one_pass(count):
    start = time.perf_counter()
    trio.run(talk, count)
    return time.perf_counter() - start


passes, count = int(sys.argv[1]), int(sys.argv[2])
print(min(one_pass(count) for _ in range(passes)) / (2 * count) * 1e6, flush=True)
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


def passes(tree: Path, conversations: int) -> list[str]:
    """The command that serves passes of scenario (a) with the package in ``tree``."""
    return [sys.executable, "-c", PASSES, str(tree), str(BENCHMARKS), str(conversations)]


def public(tree: Path, passes: int, conversations: int) -> tuple[list[str], dict[str, str]]:
    """The command, and its environment, of a user's program that takes ``passes`` passes of scenario (a) over
    ``conversations`` conversations with the package in ``tree`` (first on ``PYTHONPATH``; no hash seed set). It
    must run in ``tree``: ``python -c`` puts the working directory before ``PYTHONPATH``, so from this checkout
    both sides would import this checkout's package."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    return [sys.executable, "-c", PUBLIC, str(passes), str(conversations)], env


def public_run(tree: Path, passes: int, conversations: int) -> float:
    """Microseconds per turn of the best of ``passes`` passes, in an interpreter of its own."""
    command, env = public(tree, passes, conversations)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PASS_TIMEOUT * passes, env=env, cwd=tree
        )
    except subprocess.TimeoutExpired:
        raise CompareError(f"a run took over {PASS_TIMEOUT * passes}s") from None
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        raise CompareError(f"a run failed: {lines[-1] if lines else f'exit code {done.returncode}'}")
    return float(done.stdout)


def public_pairs(
    base_tree: Path, new_tree: Path, conversations: int, rounds: int, passes: int
) -> list[tuple[float, float]]:
    """(base, new) microseconds per turn of ``rounds`` pairs of runs, the base first in one pair and second in
    the next."""
    pairs = []
    for number in range(rounds):
        if number % 2:
            after = public_run(new_tree, passes, conversations)
            pairs.append((public_run(base_tree, passes, conversations), after))
        else:
            before = public_run(base_tree, passes, conversations)
            pairs.append((before, public_run(new_tree, passes, conversations)))
    return pairs


class Side:
    """One side's interpreter, taking passes of scenario (a) when asked."""

    def __init__(self, tree: Path, conversations: int, seed: int) -> None:
        self.process = subprocess.Popen(
            passes(tree, conversations),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        )

    def run_pass(self) -> float:
        """Microseconds per turn of one pass (``CompareError`` when the side fails or takes too long)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write("\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise CompareError(f"a run failed: {self.failure()}") from None
        ready, _, _ = select.select([self.process.stdout], [], [], PASS_TIMEOUT)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            raise CompareError(f"a run failed: {self.failure()}" if ready else f"a pass took over {PASS_TIMEOUT}s")
        return float(line)

    def failure(self) -> str:
        """The last line the side wrote to stderr, once it has ended."""
        self.close()
        assert self.process.stderr is not None
        lines = self.process.stderr.read().strip().splitlines()
        return lines[-1] if lines else f"exit code {self.process.returncode}"

    def close(self) -> None:
        """End the side: close its input, and kill it if it does not end by itself."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


def interleaved(
    base_tree: Path, new_tree: Path, conversations: int, rounds: int, passes: int, side: Any = None
) -> list[tuple[float, float]]:
    """(base, new) figures of every pair of passes (microseconds per turn, for a :class:`Side`): ``rounds`` pairs
    of interpreters sharing a fresh hash seed each, taking ``passes`` passes in turn after one pass each to warm
    up (imports, caches). ``side`` makes an interpreter, as :class:`Side` does (the default)."""
    make = Side if side is None else side
    pairs = []
    for _ in range(rounds):
        seed = random.randrange(1, 2**32)
        base, new = make(base_tree, conversations, seed), make(new_tree, conversations, seed)
        try:
            base.run_pass(), new.run_pass()
            for number in range(passes):
                if number % 2:
                    after = new.run_pass()
                    pairs.append((base.run_pass(), after))
                else:
                    before = base.run_pass()
                    pairs.append((before, new.run_pass()))
        finally:
            base.close()
            new.close()
    return pairs


def quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles: how far the pairs' ratios spread on this machine at this time."""
    if len(values) < 2:
        return values[0], values[0]
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return first, third


#: What ``--instructions`` reports per turn: the name in the report, and the cachegrind events it sums.
SIMULATED = {
    "instructions": ("Ir",),
    "l1_data_misses": ("D1mr", "D1mw"),
    "l1_instruction_misses": ("I1mr",),
    "mispredicted_branches": ("Bcm", "Bim"),
}


def count_events(tree: Path, conversations: int, scratch: Path, *, as_user: bool = False) -> dict[str, int]:
    """Per turn of scenario (a) with the package in ``tree``, each :data:`SIMULATED` figure: cachegrind's totals
    for ``conversations`` conversations minus one conversation's, over their two turns each (``as_user``: of the
    ``--public`` program, building each conversation included)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise CompareError("--instructions needs valgrind (Debian's valgrind package)")
    totals = []
    for count in (1, conversations):
        output = scratch / f"cachegrind.{tree.name}.{count}"
        if as_user:
            command, env = public(tree, 1, count)
        else:
            command, env = passes(tree, count), dict(os.environ)
        subprocess.run(
            [
                valgrind,
                "--tool=cachegrind",
                "--cache-sim=yes",
                "--branch-sim=yes",
                f"--cachegrind-out-file={output}",
                *command,
            ],
            input="\n",  # one pass
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
            env={**env, "PYTHONHASHSEED": "0"},
            cwd=tree,
        )
        lines = output.read_text().splitlines()
        events = next(line for line in lines if line.startswith("events:")).split()[1:]
        summary = next(line for line in lines if line.startswith(("summary:", "totals:"))).split()[1:]
        totals.append(dict(zip(events, map(int, summary), strict=True)))
    turns = 2 * (conversations - 1)
    return {
        name: sum(totals[1][event] - totals[0][event] for event in events) // turns
        for name, events in SIMULATED.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="the commit to compare with (default: HEAD with --smoke)")
    parser.add_argument(
        "--rounds", type=int, help="pairs of interpreters, one seed each (default: 5; --public: pairs of runs, 6)"
    )
    parser.add_argument(
        "--passes", type=int, help="passes each pair takes in turn (default: 10; --public: each run's, best of 5)"
    )
    parser.add_argument("--conversations", type=int, help="conversations per pass (default: 1000; --public: 300)")
    parser.add_argument("--public", action="store_true", help="time a user's program: see above")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions, cache misses and mispredicted branches with cachegrind",
    )
    parser.add_argument("--smoke", action="store_true", help="small sizes, to check the benchmark runs")
    options = parser.parse_args()
    defaults = (6, 5, 300) if options.public else (5, 10, 1000)
    if options.smoke:
        defaults = (2, 2, 30) if options.public else (1, 2, 50)
        options.base = options.base or "HEAD"
    options.rounds = options.rounds or defaults[0]
    options.passes = options.passes or defaults[1]
    options.conversations = options.conversations or defaults[2]
    if not options.base:
        parser.error("--base is required (a commit, e.g. a tag or a hash)")
    try:
        with tempfile.TemporaryDirectory(prefix="dial-compare-") as scratch:
            base_tree = export(options.base, Path(scratch) / "base")
            new_tree = CHECKOUT
            if options.public:
                pairs = public_pairs(base_tree, new_tree, options.conversations, options.rounds, options.passes)
            else:
                pairs = interleaved(base_tree, new_tree, options.conversations, options.rounds, options.passes)
            ratios = [new / base for base, new in pairs]
            report: dict[str, object] = {
                "benchmark": "compare",
                "python": platform.python_version(),
                "smoke": options.smoke,
                "scenario": "a, public API" if options.public else "a, bench_runtime",
                "base": options.base,
                "rounds": options.rounds,
                "passes": options.passes,
                "conversations": options.conversations,
                "a_base_us_per_turn": round(min(base for base, _ in pairs), 1),
                "a_new_us_per_turn": round(min(new for _, new in pairs), 1),
                "a_ratio_median_of_pairs": round(statistics.median(ratios), 3),
                "a_ratio_quartiles": [round(q, 3) for q in quartiles(ratios)],
                "target_ratio": 1.05,
            }
            if options.instructions:
                count = 21 if options.smoke else 401
                as_user = options.public
                base_counts = count_events(base_tree, count, Path(scratch), as_user=as_user)
                new_counts = count_events(new_tree, count, Path(scratch), as_user=as_user)
                for name in SIMULATED:
                    report[f"a_base_{name}_per_turn"] = base_counts[name]
                    report[f"a_new_{name}_per_turn"] = new_counts[name]
                    report[f"a_{name}_ratio"] = round(new_counts[name] / max(base_counts[name], 1), 3)
    except CompareError as error:
        sys.exit(f"bench_compare: {error}")
    except subprocess.CalledProcessError as error:
        lines = (error.stderr or "").strip().splitlines()
        sys.exit(f"bench_compare: a run failed: {lines[-1] if lines else error}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
