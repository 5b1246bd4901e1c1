"""Replay of recorded conversations for a base commit and the working tree, side by side: prints one JSON line.

Each side records the demo conversation (``dial_runtime.demo``: five turns, four suggestions, an edit refused and
then taken, a dismissal, a hand-off) with its own code, whole and streamed in chunks of 7 characters, checks that
each replays identical, then times ``replay`` over ``--conversations`` copies of them (half whole, half streamed),
and prints microseconds per conversation. The sides run in interpreters of their own, with the same string-hash
seed each round (a new seed per round), and take their passes in turn, the base first in one pair and second in
the next, so the machine's swings weigh on both alike. The report gives each side's best pass and the median of the
pairs' ratios (new over base), with their quartiles.

``--smoke`` runs small sizes and compares the working tree with ``HEAD`` unless ``--base`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_compare import CHECKOUT, CompareError, export, interleaved, quartiles

#: Records the demo (whole and streamed) with the package at argv[1], checks each replays identical, then times one
#: pass of replays over argv[2] conversations for each line read; prints microseconds per conversation.
PASSES = """
import sys
sys.path.insert(0, sys.argv[1])
import time
import anyio
from dial_runtime import Conversation, replay, scripted_human
from dial_runtime.demo import DECISIONS, SCRIPT, NotesDomain, run_demo


class Streaming:
    def __init__(self, replies):
        self.replies = list(replies)

    async def send(self, message):
        return self.replies.pop(0)

    async def stream(self, message):
        reply = self.replies.pop(0)
        for start in range(0, len(reply), 7):
            yield reply[start : start + 7]


async def streamed():
    replies = [reply for _, turn in SCRIPT for reply in turn]
    conversation = Conversation(agent=Streaming(replies), domain=NotesDomain(), human=scripted_human(DECISIONS))
    for words, _ in SCRIPT:
        await conversation.say(words)
    return conversation


logs = [list(anyio.run(run_demo, lambda line: None).log), list(anyio.run(streamed).log)]
for log in logs:
    report = replay(log, domain=NotesDomain())
    assert report.ok, str(report)
count = int(sys.argv[2])
batch = [logs[number % 2] for number in range(count)]
for _ in sys.stdin:
    began = time.perf_counter()
    for log in batch:
        replay(log, domain=NotesDomain())
    print((time.perf_counter() - began) / count * 1e6, flush=True)
"""


class Side:
    """An interpreter serving passes for one side."""

    def __init__(self, tree: Path, conversations: int, seed: int) -> None:
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", PASSES, str(tree), str(conversations)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tree,
            env=env,
        )

    def run_pass(self) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read() if self.process.stderr is not None else ""
            raise CompareError(
                f"a side stopped: {error.strip().splitlines()[-1] if error.strip() else 'no output'}"
            )
        return float(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="the commit to compare with (default: HEAD with --smoke)")
    parser.add_argument("--conversations", type=int, default=1000, help="replays per pass (default: 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of interpreters (default: 3)")
    parser.add_argument("--passes", type=int, default=4, help="passes per interpreter (default: 4)")
    parser.add_argument("--smoke", action="store_true", help="small sizes, to check the benchmark runs")
    args = parser.parse_args()
    base = args.base or ("HEAD" if args.smoke else None)
    if base is None:
        parser.error("--base is needed (or --smoke)")
    conversations, rounds, passes = (20, 1, 2) if args.smoke else (args.conversations, args.rounds, args.passes)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            base_tree = export(base, Path(scratch))
            pairs = interleaved(base_tree, CHECKOUT, conversations, rounds, passes, side=Side)
    except CompareError as error:
        print(f"bench_replay: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    ratios = [new / old for old, new in pairs]
    low, high = quartiles(ratios)
    print(
        json.dumps(
            {
                "benchmark": "replay",
                "python": platform.python_version(),
                "base": base,
                "conversations": conversations,
                "base_us_per_conversation": round(min(old for old, _ in pairs), 1),
                "new_us_per_conversation": round(min(new for _, new in pairs), 1),
                "ratio_new_over_base": round(statistics.median(ratios), 3),
                "ratio_quartiles": [round(low, 3), round(high, 3)],
            }
        )
    )


if __name__ == "__main__":
    main()
