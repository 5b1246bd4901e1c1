"""Runtime benchmarks: prints one JSON line.

Scenarios (ARCHITECTURE.md): (a) 1,000 conversations x one ``say`` (a suggestion + declare, accepted, then an
acknowledge: 2 turns each), in microseconds per turn; (b) one reply with 500 and with 1,000 suggestions, and the
ratio of their times (the median over pairs of runs); (c) one conversation of 2,000 ``say`` calls, the last
tenth's time over the first tenth's; (m) bytes held per conversation after one ``say``, and (r) of those, the
bytes the runtime holds (the application's agent, domain and person's function made beforehand). ``--smoke`` runs
small sizes, for CI; ``bench_memory.py`` measures (m) and (r) side by side with another commit.

The figures depend on the interpreter's build as much as on the machine: a CPython built without profile-guided
and link-time optimisation (pyenv's default) runs scenario (a) about a quarter slower than the same version built
with them (Debian's, python.org's, the Docker images'). The JSON names the Python version it ran on.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any, ClassVar

import trio

from dial_runtime import ActionSpec, Conversation, policy_human

SUGGESTION_REPLY = (
    "Sure.\n<dial>\n"
    '  <dial-suggest action="add-note">Add "buy milk"</dial-suggest>\n'
    '  <dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare>\n'
    "</dial>"
)
ACKNOWLEDGE_REPLY = '<dial>\n  <dial-acknowledge of="sg-1">Added.</dial-acknowledge>\n</dial>'


#: Timed runs per figure; the best one is reported (the machine's other load only ever adds time).
ROUNDS = 7


class Notes:
    """The reference scenario's domain: one mutating action, validated, previewed, run."""

    actions: ClassVar[dict[str, ActionSpec]] = {"add-note": ActionSpec(mutates=True)}

    def __init__(self) -> None:
        self.count = 0

    def validate(self, action: str, payload: Any) -> Any:
        return {"ok": True} if isinstance(payload, dict) and payload.get("text") else {"ok": False, "code": "x"}

    def preview(self, action: str, payload: Any) -> str:
        return f"Add the note '{payload['text']}'"

    def run(self, action: str, payload: Any) -> Any:
        self.count += 1
        return {"count": self.count}

    def context(self) -> str:
        return f'<context notes="{self.count}"/>'


class Alternating:
    """Replies with a suggestion, then an acknowledgement, again and again."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.turn = 0

    def send(self, message: str) -> str:
        reply = self.replies[self.turn % len(self.replies)]
        self.turn += 1
        return reply


def conversation(replies: list[str]) -> Conversation:
    return Conversation(agent=Alternating(replies), domain=Notes(), human=policy_human("accept"))


def timed(function: Callable[[], Any]) -> float:
    """Seconds ``function`` takes under trio, from a collected heap: every run starts the garbage collector's
    generations empty, so whether a full collection falls inside a run does not depend on the runs before it."""
    gc.collect()
    start = time.perf_counter()
    trio.run(function)
    return time.perf_counter() - start


def scenario_a(count: int) -> float:
    """Microseconds of runtime per turn over ``count`` conversations of one two-turn ``say``."""
    conversations = [conversation([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]) for _ in range(count)]

    async def run() -> None:
        for each in conversations:
            result = await each.say("add a note: buy milk")
            assert result.turns == 2 and result.outcomes[0].status == "done"

    return min(timed(run) for _ in range(ROUNDS)) / (2 * count) * 1e6


def scenario_b(count: int) -> tuple[float, float, float]:
    """Seconds to handle one reply of ``count`` and of ``2 * count`` suggestions (each the best of ``ROUNDS``
    runs), and the ratio of the two: the median over ``ROUNDS`` pairs of runs, each pair run back to back.

    Within a pair the machine is in one state; this machine's speed swings by half within seconds, which moves a
    ratio of two separately taken minima anywhere from 1.5 to 2.7 for the same code, while the median of paired
    ratios stays within a tenth of what counting instructions gives.
    """

    def reply_of(size: int) -> str:
        elements = "".join(
            f'<dial-suggest action="add-note"><dial-payload>{{"text":"note {n}"}}</dial-payload></dial-suggest>'
            for n in range(size)
        )
        return f"<dial>{elements}</dial>"

    def run_with(size: int) -> Callable[[], Any]:
        reply = reply_of(size)

        async def run() -> None:
            result = await conversation([reply, ACKNOWLEDGE_REPLY]).say("add them all")
            assert len(result.outcomes) == size

        return run

    small, large = run_with(count), run_with(2 * count)
    pairs = [(timed(small), timed(large)) for _ in range(ROUNDS)]
    return (
        min(pair[0] for pair in pairs),
        min(pair[1] for pair in pairs),
        statistics.median(pair[1] / pair[0] for pair in pairs),
    )


def scenario_c(calls: int) -> float:
    """The last tenth of ``calls`` say calls over the first tenth, on one conversation: each tenth's best time
    over ``ROUNDS`` conversations, so that one noisy lap cannot pass for drift (drift shows in every round)."""
    tenth = calls // 10
    first = last = float("inf")
    for _ in range(ROUNDS):
        talk = conversation([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY])
        laps: list[float] = []

        async def run(talk: Conversation = talk, laps: list[float] = laps) -> None:
            for _ in range(10):
                began = time.perf_counter()
                for _ in range(tenth):
                    await talk.say("add a note: buy milk")
                laps.append(time.perf_counter() - began)

        trio.run(run)
        first, last = min(first, laps[0]), min(last, laps[-1])
    return last / first


def held_per_conversation(build: Callable[[], list[Conversation]]) -> float:
    """Bytes held per conversation (tracemalloc, after a warm-up) by the conversations ``build`` makes, each
    once told one thing: what building them and the ``say`` leave allocated."""
    scenario_a(10)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    conversations = build()

    async def run() -> None:
        for each in conversations:
            await each.say("add a note: buy milk")

    trio.run(run)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / len(conversations)


def scenario_m(count: int) -> float:
    """Bytes held per conversation after one ``say``, its agent, domain and person's function included."""
    replies = [SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]
    return held_per_conversation(lambda: [conversation(replies) for _ in range(count)])


def scenario_r(count: int) -> float:
    """Bytes the runtime holds per conversation after one ``say``: scenario (m) with the application's own objects
    (its agent, domain and person's function) made before the count starts, so what is counted is the
    conversation, its log and state, and what the run adds to the application's objects (the domain's count)."""
    parts = [
        (Alternating([SUGGESTION_REPLY, ACKNOWLEDGE_REPLY]), Notes(), policy_human("accept")) for _ in range(count)
    ]
    return held_per_conversation(lambda: [Conversation(agent=a, domain=d, human=h) for a, d, h in parts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="small sizes, to check the benchmark runs")
    smoke = parser.parse_args().smoke
    scale = 10 if smoke else 1
    small, large, ratio = scenario_b(500 // scale)
    print(
        json.dumps(
            {
                "benchmark": "runtime",
                "python": platform.python_version(),
                "smoke": smoke,
                "a_us_per_turn": round(scenario_a(1000 // scale), 1),
                "b_500_suggestions_s": round(small, 4),
                "b_1000_suggestions_s": round(large, 4),
                "b_ratio_1000_vs_500": round(ratio, 2),
                "c_last_tenth_vs_first": round(scenario_c(2000 // scale), 2),
                "m_bytes_per_conversation": round(scenario_m(200 // scale)),
                "r_runtime_bytes_per_conversation": round(scenario_r(200 // scale)),
                "targets": {"a_us_per_turn": 100, "b_ratio": 2.3, "c_ratio": 1.3, "m_bytes": 16384},
            }
        )
    )


if __name__ == "__main__":
    main()
