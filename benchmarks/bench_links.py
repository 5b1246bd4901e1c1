"""A decision through a signed link against one through the panel: prints one JSON line.

One uvicorn server (in this process's thread) serves ``create_app`` on a SQLite file, with a keyring. Each
conversation has one card waiting (the notes domain's ``add-note``), and is then decided either by ``POST
/decide`` with a link's token (``link``) or by an AG-UI run that resumes the card's interrupt (``panel``), both as
a client of the server would, each ending with the agent's acknowledgement. The two kinds alternate, so both see
the same machine. Reported per kind: the median and p90 of the request's wall time, in milliseconds, and the
ratio of the medians (the issue's target: a link costs no more than the panel). ``--smoke`` decides a few.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from dial_runtime.decisions.links import Keyring, MemoryUsedTokens, generate_key
from dial_runtime.demo import NotesDomain
from dial_runtime.web import create_app, decision_links, scripted_agents

PROPOSE = (
    '<dial><dial-suggest action="add-note"><dial-payload>{"text": "buy milk"}</dial-payload></dial-suggest></dial>'
)
ACK = "<dial><dial-acknowledge>Added.</dial-acknowledge></dial>"


@contextmanager
def serving(app: Any) -> Iterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", ws="none", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def run_input(thread: str, **fields: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": uuid.uuid4().hex, "messages": [], **fields}


def waiting_card(client: httpx.Client, thread: str) -> dict[str, Any]:
    """Start a conversation whose one card waits; its interrupt."""
    body = run_input(thread, messages=[{"id": uuid.uuid4().hex, "role": "user", "content": "add milk"}])
    finished = events(client.post("/agui", json=body).text)[-1]
    assert finished["type"] == "RUN_FINISHED", finished
    (interrupt,) = finished["outcome"]["interrupts"]
    return interrupt  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=200, help="decisions of each kind (default: 200)")
    parser.add_argument("--smoke", action="store_true", help="a few, for CI")
    args = parser.parse_args()
    count = 5 if args.smoke else args.decisions
    keyring = Keyring([generate_key("HS256")])
    with tempfile.TemporaryDirectory() as scratch:
        app = create_app(
            store=f"sqlite:{Path(scratch) / 'links.db'}",
            domain=NotesDomain(),
            agent=scripted_agents([PROPOSE, ACK]),
            links=keyring,
            used_tokens=MemoryUsedTokens(),
            public_url="http://127.0.0.1",
            deadlines=None,
        )
        timings: dict[str, list[float]] = {"link": [], "panel": []}
        with serving(app) as base_url, httpx.Client(base_url=base_url, timeout=30) as client:
            for number in range(2 * count + 2):  # the first pair warms the server up
                kind = "link" if number % 2 == 0 else "panel"
                thread = f"{kind}-{number}"
                interrupt = waiting_card(client, thread)
                digest = interrupt["metadata"]["digest"]
                if kind == "link":
                    card = _Card(interrupt["id"], digest)
                    url = decision_links(keyring, base_url, thread, card, decider="local")["accept"]
                    token = url.split("token=", 1)[1]
                    started = time.perf_counter()
                    answer = client.post("/decide", json={"token": token, "decision": "accept"})
                    took = time.perf_counter() - started
                    assert answer.status_code == 200 and answer.json()["card"]["outcome"] == "Done", answer.text
                else:
                    approved = {"approved": True, "digest": digest}
                    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": approved}]
                    started = time.perf_counter()
                    done = events(client.post("/agui", json=run_input(thread, resume=resume)).text)
                    took = time.perf_counter() - started
                    assert done[-1]["type"] == "RUN_FINISHED", done[-1]
                if number >= 2:
                    timings[kind].append(took * 1000)
    report: dict[str, Any] = {
        "benchmark": "links",
        "python": platform.python_version(),
        "smoke": args.smoke,
        "decisions_each": count,
    }
    for kind, values in timings.items():
        ordered = sorted(values)
        report[kind] = {
            "median_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[max(0, int(len(ordered) * 0.9) - 1)], 2),
        }
    report["link_over_panel"] = round(report["link"]["median_ms"] / report["panel"]["median_ms"], 3)
    print(json.dumps(report))


class _Card:
    """What ``decision_links`` reads of a card: its id and the digest of the payload it shows."""

    def __init__(self, ident: str, digest: str) -> None:
        self.id = ident
        self.digest = digest


if __name__ == "__main__":
    sys.exit(main())
