"""Streaming benchmark: prints one JSON line.

A real chat-completions server on loopback streams a reply in 40 chunks 20 ms apart; a ``ChatAgent`` reads it and
a ``Conversation`` handles it. Measured: the time from the arrival of the chunk that completes the first
``</dial-inform>`` to the runtime's ``inform`` event (median and worst of the runs; target <= 5 ms), and, for
contrast, the time from sending to that ``inform`` event with the reply streamed and with the same reply sent whole
(the server takes the same 800 ms to produce it). ``--smoke`` runs twice instead of twenty times, for CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import trio

from dial_runtime import ChatAgent, Conversation, policy_human

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
    print(json.dumps(trio.run(main, 2 if arguments.smoke else 20)))
