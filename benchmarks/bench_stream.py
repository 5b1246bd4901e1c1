"""Streaming benchmark: prints one JSON line.

A real chat-completions server on loopback streams a reply in 40 chunks 20 ms apart; a ``ChatAgent`` reads it and
a ``Conversation`` handles it. Measured: the time from the arrival of the chunk that completes the first
``</dial-inform>`` to the runtime's ``inform`` event (median and worst of the runs; target <= 5 ms), and, for
contrast, the time from sending to that ``inform`` event with the reply streamed and with the same reply sent whole
(the server takes the same 800 ms to produce it).

The parser alone (:class:`StreamParser`, no server): ``parser_prose_ms`` is the CPU time to feed 800 KB of prose
in 4-character chunks (the common prose-only reply of a language model) and ``parser_prose_ratio_8x`` the time
for 8x that over the time for it (8 is linear, 64 quadratic), best of three each; ``parser_inform_ratio_8x`` the
same for one long inform streamed as text deltas; ``parser_cut_peak_mb`` the peak of traced memory while an
endless envelope is fed until the 8 MiB limit cuts it.

``--smoke`` runs twice instead of twenty times, with smaller parser inputs, for CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import trio

from dial_runtime import ChatAgent, Conversation, policy_human
from dial_runtime.errors import DialSizeError
from dial_runtime.language.stream import StreamParser

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from tests.openai_server import OpenAIServer, Reply

CHUNKS, INTERVAL = 40, 0.020
REPLY = (
    "<dial>\n  <dial-inform>Here is what I found.</dial-inform>\n"
    + "".join(f"  <dial-inform>Detail {n}: the notes are in order.</dial-inform>\n" for n in range(12))
    + "</dial>"
)


class Notes:
    """A domain with nothing to run: the benchmark's replies only inform."""

    actions: ClassVar[dict[str, Any]] = {}

    def run(self, action: str, payload: Any) -> None:
        raise AssertionError("nothing runs in this benchmark")


class Whole:
    """The same agent without ``stream``: the runtime waits for each whole reply."""

    def __init__(self, agent: ChatAgent) -> None:
        self.agent = agent

    async def send(self, message: str) -> str:
        return await self.agent.send(message)


class Timed:
    """Streams through a ChatAgent and notes when the first ``</dial-inform>`` has arrived."""

    def __init__(self, agent: ChatAgent) -> None:
        self.agent = agent
        self.arrived: float | None = None

    async def send(self, message: str) -> str:
        return await self.agent.send(message)

    async def stream(self, message: str) -> AsyncIterator[str]:
        received = ""
        async for piece in self.agent.stream(message):
            received += piece
            if self.arrived is None and "</dial-inform>" in received:
                self.arrived = time.perf_counter()
            yield piece


async def once(server: OpenAIServer, *, streamed: bool) -> tuple[float, float | None]:
    """Seconds from sending to the first inform event, and (streamed) from its chunk's arrival to the event."""
    server.add(
        Reply(REPLY, chunks=CHUNKS, interval=INTERVAL) if streamed else Reply(REPLY, delay=CHUNKS * INTERVAL)
    )
    shown: list[float] = []
    async with ChatAgent(server.base_url, "bench") as chat:
        timed = Timed(chat)
        conversation = Conversation(
            agent=timed if streamed else Whole(chat),
            domain=Notes(),
            human=policy_human(),
            on_event=lambda event: shown.append(time.perf_counter()) if event.type == "inform" else None,
        )
        started = time.perf_counter()
        await conversation.say("what do my notes say?")
    first = shown[0]
    return first - started, (first - timed.arrived) if streamed and timed.arrived is not None else None


PROSE = "Plain words of a long answer, with a < sign, a > sign and no envelope at all.\n"


def feed_seconds(text: str, size: int = 4) -> float:
    """Best CPU time of three to feed ``text`` in chunks of ``size`` characters and read the text deltas."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        parser = StreamParser()
        for start in range(0, len(text), size):
            parser.feed(text[start : start + size])
            parser.text_deltas()
        best = min(best, time.process_time() - started)
    return best


def cut_peak_mb() -> float:
    """Peak traced memory while an endless envelope is fed in 64 KiB chunks until the limit cuts it."""
    parser = StreamParser()
    piece = "x" * 65536
    tracemalloc.start()
    try:
        parser.feed("<dial><dial-inform>")
        while True:
            parser.feed(piece)
    except DialSizeError:
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def parser_figures(smoke: bool) -> dict[str, Any]:
    count = 1_000 if smoke else 10_000  # 10,000 lines of prose are 800 KB
    head = "<dial><dial-inform>"
    return {
        "parser_prose_ms": round(feed_seconds(PROSE * count) * 1000, 1),
        "parser_prose_ratio_8x": round(feed_seconds(PROSE * count * 8) / feed_seconds(PROSE * count), 2),
        "parser_inform_ratio_8x": round(
            feed_seconds(head + "word &amp; " * count * 8) / feed_seconds(head + "word &amp; " * count), 2
        ),
        "parser_cut_peak_mb": round(cut_peak_mb(), 1),
    }


async def main(runs: int) -> dict[str, Any]:
    with OpenAIServer() as server:
        await once(server, streamed=True)
        streamed = [await once(server, streamed=True) for _ in range(runs)]
        whole = [await once(server, streamed=False) for _ in range(runs)]
    latencies = [latency for _, latency in streamed if latency is not None]
    return {
        "benchmark": "stream",
        "runs": runs,
        "chunks": CHUNKS,
        "interval_ms": INTERVAL * 1000,
        "wire_to_inform_ms_median": round(statistics.median(latencies) * 1000, 3),
        "wire_to_inform_ms_max": round(max(latencies) * 1000, 3),
        "streamed_send_to_first_inform_ms": round(statistics.median(s for s, _ in streamed) * 1000, 1),
        "whole_send_to_first_inform_ms": round(statistics.median(s for s, _ in whole) * 1000, 1),
        "target_wire_to_inform_ms": 5,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="two runs, to check the benchmark works")
    arguments = parser.parse_args()
    figures = trio.run(main, 2 if arguments.smoke else 20)
    print(json.dumps({**figures, **parser_figures(arguments.smoke)}))
