"""A worker process for the durability tests: drives one stored conversation, and stops where it is told.

``python -m tests.crash_child STEP BACKEND STORE_URL CONVERSATION_ID RUNS_FILE`` (from the repository's root):

- ``send``, ``decide``, ``run``, ``report``: say something and block forever at that step of the turn (after the
  message reached the agent; while the person decides; inside the action; at the send that reports an outcome),
  having printed ``ready``: the test kills the process there.
- ``decide-later``: take the deferred decision on ``sg-1`` (``Accept()``, by ``b``), print the result as JSON.
- ``bulk``: accept every card of the store's inbox in one bulk (:func:`~dial_runtime.decisions.inbox.decide_each`,
  a conversation at a time, in the order of their ids, by ``b``), blocking inside the run of the note whose text is
  CONVERSATION_ID, having printed ``ready``: the test kills the process mid-bulk there.
- ``race``: print ``ready``, wait for a line on stdin, then say until :data:`RACE_SAYS` calls went through,
  counting the calls refused as busy (and apart, as conflicts); print the counts as JSON. Each worker's first
  call waits, holding the conversation, until the other was refused (:class:`Meeting`), so the two always meet.

The domain appends ``<text> <pid>`` to ``RUNS_FILE`` each time an action runs, so a test can count runs across
processes.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from dial_runtime import (
    Accept,
    ActionSpec,
    Conversation,
    ConversationBusy,
    Say,
    Suggestion,
    policy_human,
    scripted_human,
)
from dial_runtime.decisions.deadlines import conversation_opener
from dial_runtime.decisions.inbox import BulkChoice, Inbox, decide_each
from dial_runtime.stores import StoreConflict, open_store

from .fakes import Agent, envelope, suggest

#: One suggestion; two suggestions; a reply that needs nothing back.
ONE = envelope(suggest("add-note", '{"text":"a"}'))
TWO = envelope(suggest("add-note", '{"text":"a"}'), suggest("add-note", '{"text":"b"}'))
OK = envelope("<dial-acknowledge>Noted.</dial-acknowledge>")

#: The words a ``Say`` decision gives in the ``send`` step.
INSTEAD = "actually, only b"

#: Successful calls each ``race`` worker makes.
RACE_SAYS = 12


def ready() -> None:
    """Tell the test that the process reached its step."""
    print("ready", flush=True)


async def ready_and_hang(*_: Any) -> Any:
    """Signal, then block until killed."""
    ready()
    await anyio.sleep_forever()


class FileNotes:
    """A notes domain that records every run in a file (and blocks inside the run of the note ``hold``)."""

    actions: ClassVar[dict[str, ActionSpec]] = {"add-note": ActionSpec(mutates=True)}

    def __init__(self, runs: Path, hold: str | None = None) -> None:
        self.runs = runs
        self.hold = hold

    def validate(self, action: str, payload: Any) -> Any:
        return {"ok": isinstance(payload, dict) and bool(payload.get("text"))}

    def preview(self, action: str, payload: Any) -> str:
        return f"Add the note '{payload['text']}'"

    async def run(self, action: str, payload: Any) -> Any:
        with self.runs.open("a") as file:
            file.write(f"{payload['text']} {os.getpid()}\n")
        if payload["text"] == self.hold:
            await ready_and_hang()
        return {"ran": payload["text"]}

    def context(self) -> str:
        return ""

    def ran(self) -> list[str]:
        """Every run so far, in every process, as ``<text> <pid>``."""
        return self.runs.read_text().splitlines() if self.runs.exists() else []


class HoldingHuman:
    """Accepts every suggestion but the one with id ``hold``, on which it blocks."""

    def __init__(self, hold: str) -> None:
        self.hold = hold

    async def decide(self, suggestion: Suggestion) -> Any:
        if suggestion.id == self.hold:
            await ready_and_hang()
        return Accept()


class Meeting:
    """Makes the two ``race`` workers meet, every time: the first call to hold the conversation waits inside it
    until the other worker has been refused as busy (a marker file beside the runs file says so)."""

    def __init__(self, runs: Path) -> None:
        self.marker = runs.with_name(runs.name + ".refused")

    def refused(self) -> None:
        self.marker.touch()

    async def met(self) -> None:
        with anyio.fail_after(10):
            while not self.marker.exists():
                await anyio.sleep(0.005)


class Responder:
    """Proposes a note for the person's words, and acknowledges a report of outcomes; its first reply waits until
    the other worker has met the lock this call holds."""

    def __init__(self, meeting: Meeting) -> None:
        self.meeting: Meeting | None = meeting

    async def send(self, message: str) -> str:
        if self.meeting is not None:
            await self.meeting.met()
            self.meeting = None
        return OK if "yield=" in message else ONE


async def crash_at(step: str, url: str, conversation_id: str, runs: Path) -> None:
    """Say something and block at ``step`` until killed."""
    agent: Any
    human: Any = scripted_human(["accept"] * 2)
    domain = FileNotes(runs)
    if step == "send":
        agent, human = Agent([TWO, ready_and_hang]), scripted_human([Say(INSTEAD)])
    elif step == "decide":
        agent, human = Agent([TWO]), HoldingHuman("sg-2")
    elif step == "run":
        agent, domain = Agent([TWO]), FileNotes(runs, hold="a")
    else:
        agent = Agent([ONE, ready_and_hang])
    conversation = await Conversation.open(
        open_store(url), conversation_id, agent=agent, domain=domain, human=human, timeout=None
    )
    await conversation.say("go")
    raise AssertionError(f"the {step} step did not block")


async def decide_later(url: str, conversation_id: str, runs: Path) -> None:
    """Take the decision another process deferred, and report what happened here."""
    store = open_store(url)
    agent = Agent([OK])
    conversation = await Conversation.open(
        store, conversation_id, agent=agent, domain=FileNotes(runs), human=scripted_human([])
    )
    result = await conversation.decide("sg-1", Accept(), by="b")
    await store.aclose()
    outcomes = [[outcome.id, outcome.status] for outcome in result.outcomes]
    print(json.dumps({"status": result.status, "turns": result.turns, "outcomes": outcomes, "sent": agent.sent}))


async def race(url: str, conversation_id: str, runs: Path) -> None:
    """Say as fast as possible once told to, with another worker doing the same on the same conversation."""
    store = open_store(url)
    meeting = Meeting(runs)
    conversation = Conversation(
        agent=Responder(meeting),
        domain=FileNotes(runs),
        human=policy_human("accept"),
        store=store,
        conversation_id=conversation_id,
    )
    await store.read(conversation_id)  # connect before the start
    ready()
    await anyio.to_thread.run_sync(sys.stdin.readline)
    done = busy = conflicts = 0
    with anyio.fail_after(20):
        while done < RACE_SAYS:
            try:
                result = await conversation.say("add a note")
            except StoreConflict:
                conflicts += 1
                continue
            except ConversationBusy:
                busy += 1
                meeting.refused()
                await anyio.lowlevel.checkpoint()
                continue
            assert (result.status, result.turns) == ("idle", 2), result
            done += 1
    await store.aclose()
    print(json.dumps({"done": done, "busy": busy, "conflicts": conflicts}))


async def bulk(url: str, hold: str, runs: Path) -> None:
    """Accept everything waiting in one bulk, blocking inside the run of the note ``hold`` until killed."""
    store = open_store(url)
    cards = sorted(await Inbox(store).waiting(), key=lambda card: card.conversation)
    choices = [
        BulkChoice(conversation=card.conversation, id=card.id, decision="accept", digest=card.digest or "")
        for card in cards
    ]
    opener = conversation_opener(store, agent=lambda *_: Agent([OK]), domain=FileNotes(runs, hold=hold))
    await decide_each(choices, open_conversation=opener, by="b", concurrency=1)
    raise AssertionError("the bulk did not block")


def main(argv: list[str]) -> None:
    step, backend, url, conversation_id, runs = argv
    if step == "bulk":
        work = partial(bulk, url, conversation_id, Path(runs))
    elif step == "decide-later":
        work = partial(decide_later, url, conversation_id, Path(runs))
    elif step == "race":
        work = partial(race, url, conversation_id, Path(runs))
    else:
        work = partial(crash_at, step, url, conversation_id, Path(runs))
    anyio.run(work, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
