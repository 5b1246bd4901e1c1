"""Model benchmark: prints one JSON line.

Measured: how often a small local model's replies keep the runtime's guarantees, with and without the domain's
grammar. N conversations of the notes domain (``dial_runtime.demo.NotesDomain``, holding two notes) run against
SmolLM2-135M on llama.cpp's ``llama-server`` (started here, on 127.0.0.1), each the person's one request naming
an action, one reply long, each with its own seed. Reported for each way: the parse rate (replies whose
envelope parses with no issue), the valid rate (suggestions proposed that the domain accepted) and the right rate
(conversations whose first accepted suggestion is the action asked for), with the model, the settings and the
date. The server and the model come from ``.ci/llama.sh`` (``DIAL_LLAMA_SERVER``, ``DIAL_LLAMA_MODEL``, else its
cache); without them the benchmark prints a one-line note and exits 0. ``--smoke`` runs one conversation each way
with few tokens, for CI: it fails only when something broke, never on the rates.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx

from dial_runtime import Conversation, parse, policy_human
from dial_runtime.demo import NotesDomain
from dial_runtime.llm.chat import ChatAgent

CACHE = Path(os.environ.get("DIAL_LLAMA_CACHE", "/var/cache/dial-runtime/llama"))
#: What the person asks for, and the action that answers it.
REQUESTS = (
    ("add a note: buy milk", "add-note"),
    ("please note that the car needs washing", "add-note"),
    ("list my notes", "list-notes"),
    ("show me every note I have", "list-notes"),
    ("remove the note 'buy bread'", "remove-note"),
    ("share the note 'call the dentist' with Ann", "share-note"),
)
NOTES = ("buy bread", "call the dentist")
#: Bounded waits, in seconds: the server's start, one conversation.
STARTUP, CONVERSATION = 60.0, 300.0


def binaries() -> tuple[Path, Path] | None:
    """llama-server and the model, from the environment or ``.ci/llama.sh``'s cache; ``None`` when absent."""
    server, model = os.environ.get("DIAL_LLAMA_SERVER"), os.environ.get("DIAL_LLAMA_MODEL")
    if server and model:
        return Path(server), Path(model)
    found = sorted(CACHE.glob("llama-server-*")), sorted(CACHE.glob("SmolLM2-135M-Instruct*.gguf"))
    return (found[0][-1], found[1][-1]) if found[0] and found[1] else None


@contextlib.contextmanager
def llama_server(
    server: Path, model: Path, *, context: int = 4096, slots: int = 1, threads: int = 2
) -> Iterator[str]:
    """A healthy llama-server with ``slots`` slots sharing ``context`` tokens, its output discarded: its base URL;
    stopped at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(context)]
    process = subprocess.Popen(
        [*command, "--parallel", str(slots), "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited with status {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not healthy in {STARTUP:.0f}s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def converse(url: str, words: str, *, constrain: bool, settings: dict[str, Any]) -> dict[str, Any]:
    """One conversation's reply, read: whether it parsed, the suggestions proposed and accepted."""
    domain = NotesDomain(NOTES)
    agent = ChatAgent.for_domain(
        f"{url}/v1", "smollm2", domain, constrain=constrain, server="llamacpp", max_retries=0, **settings
    )
    async with agent:
        conversation = Conversation(
            agent=agent, domain=domain, human=policy_human("dismiss"), timeout=CONVERSATION, max_turns=1
        )
        with anyio.fail_after(CONVERSATION):
            await conversation.say(words)
    events = [entry.event for entry in conversation.log]
    replies = [event.text for event in events if event.type == "reply"]
    envelope = parse(replies[0]) if replies else None
    return {
        "parsed": envelope is not None and not envelope.issues,
        "proposed": sum(1 for event in events if event.type == "proposed"),
        "accepted": [event.action for event in events if event.type == "suggestion"],
    }


def rates(results: list[dict[str, Any]], expected: list[str]) -> dict[str, Any]:
    """The three rates of one way's conversations, ``expected`` the action each asked for."""
    proposed = sum(result["proposed"] for result in results)
    accepted = sum(len(result["accepted"]) for result in results)
    right = sum(1 for result, action in zip(results, expected, strict=True) if result["accepted"][:1] == [action])
    count = len(results)
    return {
        "conversations": count,
        "parse_rate": round(sum(result["parsed"] for result in results) / count, 3),
        "valid_rate": round(accepted / proposed, 3) if proposed else None,
        "right_rate": round(right / count, 3),
        "suggestions_proposed": proposed,
    }


async def measure(url: str, count: int, settings: dict[str, Any]) -> dict[str, Any]:
    """``count`` conversations without the grammar, then as many with it."""
    report: dict[str, Any] = {}
    for way, constrain in (("without_grammar", False), ("with_grammar", True)):
        results, expected = [], []
        started = time.monotonic()
        for index in range(count):
            words, action = REQUESTS[index % len(REQUESTS)]
            results.append(await converse(url, words, constrain=constrain, settings={**settings, "seed": index}))
            expected.append(action)
        report[way] = {**rates(results, expected), "seconds": round(time.monotonic() - started, 1)}
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="one conversation each way, few tokens, for CI")
    parser.add_argument("--conversations", type=int, default=50, metavar="N", help="each way (default: 50)")
    args = parser.parse_args()
    found = binaries()
    if found is None:
        print(json.dumps({"benchmark": "models", "skipped": "no llama-server and model: run .ci/llama.sh"}))
        return 0
    count = 1 if args.smoke else args.conversations
    settings = {"temperature": 0.7, "max_tokens": 48 if args.smoke else 300}
    with llama_server(*found) as url:
        report = anyio.run(measure, url, count, settings, backend="trio")
    print(
        json.dumps(
            {
                "benchmark": "models",
                "model": found[1].name,
                "server": found[0].name,
                "settings": {**settings, "seed": "the conversation's index", "threads": 2},
                "date": datetime.date.today().isoformat(),
                **report,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
