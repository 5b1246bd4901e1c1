"""A deadline worker process for the deadline job tests and benchmark: ``python -m tests.deadline_worker_child
STORE_URL MODE [OPTIONS_JSON]`` (from the repository's root).

It runs :func:`dial_runtime.decisions.deadlines.run_worker` on the PostgreSQL store ``STORE_URL`` (the notes
domain of ``tests.fakes``; an agent that fails the job if it is ever sent anything), prints ``ready <pid>`` once
it fetches jobs and ``job <conversation id>`` as each job opens its conversation, and stops at SIGINT or SIGTERM.
``OPTIONS_JSON`` holds :class:`~dial_runtime.decisions.deadlines.PostgresDeadlines` options (``poll``,
``heartbeat``, ...), and ``premise_file``: the domain is then :class:`~tests.fakes.PremisedNotes`, whose notes
hold while that file does not exist, and its agent acknowledges what it is told (a lapse tells it).
``MODE`` is ``fire``, or ``hang``: the first job stops forever before it opens its conversation (a worker to kill
mid-job).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from dial_runtime import Conversation
from dial_runtime.decisions.deadlines import conversation_opener, run_worker
from dial_runtime.stores import open_store

from .fakes import Notes, PremisedNotes


class SilentAgent:
    """An expiry sends nothing: a message sent is a failure."""

    def send(self, message: str) -> str:
        raise AssertionError(f"an expiry sent the agent {message!r}")


def no_agent(conversation_id: str, log: Sequence[Any]) -> SilentAgent:
    return SilentAgent()


class AcknowledgingAgent:
    """Acknowledges every outcome it is told."""

    def send(self, message: str) -> str:
        return "<dial><dial-acknowledge>ok</dial-acknowledge></dial>"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(url: str, mode: str, options: dict[str, Any]) -> None:
    store = open_store(url)
    premise = options.pop("premise_file", None)
    if premise is None:
        opened = conversation_opener(store, agent=no_agent, domain=Notes())
    else:
        opened = conversation_opener(store, agent=lambda *_: AcknowledgingAgent(), domain=PremisedNotes(premise))
    hung = False

    async def open_conversation(conversation_id: str) -> Conversation:
        nonlocal hung
        say(f"job {conversation_id}")
        if mode == "hang" and not hung:
            hung = True
            await asyncio.Event().wait()
        return await opened(conversation_id)

    try:
        await run_worker(url, open_conversation, ready=lambda: say(f"ready {os.getpid()}"), **options)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}))
