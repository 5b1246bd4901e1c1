"""A worker process for the exactly-once tests: drives one stored conversation until it is killed.

``python -m tests.reconcile_child MODE BACKEND STORE_URL CONVERSATION_ID EFFECTS_DB NAME SEED`` (from the
repository's root): it opens the store and the effects database, prints ``ready`` and waits for a line on stdin
(so a test can start it ahead of time and let it go the moment the worker before it is dead); then it opens the
conversation (recovering what a killed worker left) and, forever, says ``please note <NAME>-<n>`` (a fresh note
each time) or, when a decision waits, sometimes takes it: the agent (:class:`NoteAgent`) proposes the note, the
person (:class:`PausingHuman`) accepts, the domain adds it. Random pauses (seeded by ``SEED``) before the say, in
the agent, in the decision and on both sides of the action's effect make a kill land anywhere in the turn.

``MODE`` is ``reconcile`` (:class:`KeyedNotes`: a run takes the idempotency key, and ``reconcile`` tells what
became of a run) or ``plain`` (:class:`PlainNotes`: no key and no ``reconcile``, so the runtime's guarantee is at
most once). Either way every effect is a row of its own transaction in the SQLite database ``EFFECTS_DB``
(:class:`Effects`), and every call the runtime makes into the domain a row too, so a test can tell what happened
across every process.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import sys
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.to_thread

from dial_runtime import Accept, ActionSpec, Conversation, ConversationBusy, Suggestion
from dial_runtime.stores import open_store

from .fakes import envelope, suggest

#: The words that name a note; the agent proposes the last note a message names.
ASK = "please note"
WORDS = re.compile(re.escape(ASK) + r" ([A-Za-z0-9-]+)")

#: The agent's answer to a message that names no note (a report of outcomes, or other words).
ACK = envelope("<dial-acknowledge>Noted.</dial-acknowledge>")

#: How long the worker tries to open a conversation that a killed worker's session still holds (PostgreSQL
#: releases a dead session's advisory lock once the server notices the connection is gone).
OPEN_WITHIN = 20.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    row INTEGER PRIMARY KEY, note TEXT NOT NULL, key TEXT UNIQUE, pid INTEGER NOT NULL, result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    row INTEGER PRIMARY KEY, kind TEXT NOT NULL, note TEXT NOT NULL, key TEXT, pid INTEGER NOT NULL
);
"""


class Pauses:
    """Random short waits, from a seeded generator: most a few milliseconds, some none."""

    def __init__(self, seed: str) -> None:
        self.random = random.Random(seed)

    async def __call__(self, longest: float) -> None:
        if self.random.random() < 0.2:
            return
        await anyio.sleep(self.random.uniform(0, longest))


class Effects:
    """The domain's own store: a SQLite database in WAL mode, each effect (and each call recorded) its own
    transaction, committed before the domain goes on."""

    def __init__(self, path: str) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None, timeout=30)

    @classmethod
    def create(cls, path: str) -> Effects:
        """Make the database (WAL: readers never wait for a writer, and the mode is kept in the file)."""
        effects = cls(path)
        effects.connection.execute("PRAGMA journal_mode=WAL")
        effects.connection.executescript(SCHEMA)
        return effects

    def close(self) -> None:
        self.connection.close()

    def called(self, kind: str, note: str, key: str | None) -> None:
        """Record that the runtime called the domain's ``kind`` (``run`` or ``reconcile``) for ``note``."""
        self.connection.execute(
            "INSERT INTO calls (kind, note, key, pid) VALUES (?, ?, ?, ?)", (kind, note, key, os.getpid())
        )

    def add(self, note: str, key: str | None) -> Any:
        """Add the note, once per key (a second add under a key records nothing and returns the first result);
        without a key, every add is an effect of its own."""
        result = {"note": note, "by": os.getpid()}
        connection = self.connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            if key is not None:
                found = self.connection.execute("SELECT result FROM effects WHERE key = ?", (key,)).fetchone()
                if found is not None:
                    connection.execute("COMMIT")
                    return json.loads(found[0])
            connection.execute(
                "INSERT INTO effects (note, key, pid, result) VALUES (?, ?, ?, ?)",
                (note, key, os.getpid(), json.dumps(result)),
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        return result

    def result(self, key: str) -> Any:
        """The result of the effect recorded under ``key``; ``LookupError`` when there is none."""
        found = self.connection.execute("SELECT result FROM effects WHERE key = ?", (key,)).fetchone()
        if found is None:
            raise LookupError(f"no note was added under the key {key}")
        return json.loads(found[0])


class PlainNotes:
    """A notes domain without keys: its ``run`` takes none and it has no ``reconcile`` (at most once)."""

    actions: ClassVar[dict[str, ActionSpec]] = {"add-note": ActionSpec(mutates=True)}

    def __init__(self, effects: Effects, pause: Pauses) -> None:
        self.effects = effects
        self.pause = pause

    def validate(self, action: str, payload: Any) -> Any:
        return {"ok": isinstance(payload, dict) and isinstance(payload.get("text"), str)}

    def preview(self, action: str, payload: Any) -> str:
        return f"Add the note '{payload['text']}'"

    def context(self) -> str:
        return ""

    async def _add(self, payload: Any, key: str | None) -> Any:
        note = payload["text"]
        self.effects.called("run", note, key)
        await self.pause(0.003)
        result = self.effects.add(note, key)
        await self.pause(0.02)  # the effect is committed and the runtime does not know yet: the window
        return result

    async def run(self, action: str, payload: Any) -> Any:
        return await self._add(payload, None)


class KeyedNotes(PlainNotes):
    """A notes domain that adds a note once per idempotency key and tells, for a key, what became of its run."""

    async def run(self, action: str, payload: Any, *, key: str | None = None) -> Any:
        assert key is not None, "the runtime ran a keyed run without its key"
        return await self._add(payload, key)

    def reconcile(self, action: str, payload: Any, *, key: str) -> Any:
        self.effects.called("reconcile", payload["text"], key)
        return self.effects.result(key)


def domain_for(mode: str, effects: Effects, pause: Pauses) -> PlainNotes:
    if mode == "reconcile":
        return KeyedNotes(effects, pause)
    if mode == "plain":
        return PlainNotes(effects, pause)
    raise ValueError(f"no such mode: {mode!r}")


class NoteAgent:
    """Answers a message that names a note (the person's words) with one ``add-note`` suggestion of the last note
    it names, and anything else with an acknowledgement; after a pause."""

    def __init__(self, pause: Pauses | None = None) -> None:
        self.pause = pause

    async def send(self, message: str) -> str:
        if self.pause is not None:
            await self.pause(0.005)
        named = WORDS.findall(message)
        if not named:
            return ACK
        return envelope(suggest("add-note", json.dumps({"text": named[-1]})))


class PausingHuman:
    """Accepts every suggestion, after a pause."""

    def __init__(self, pause: Pauses) -> None:
        self.pause = pause

    async def decide(self, suggestion: Suggestion) -> Any:
        await self.pause(0.005)
        return Accept()

    def answer(self, ask: Any) -> str:
        raise AssertionError(f"the agent asked nothing, yet the person was asked {ask!r}")


async def open_conversation(store: Any, conversation_id: str, **parts: Any) -> Conversation:
    """Open the conversation, waiting while a killed worker's lock is still held."""
    with anyio.fail_after(OPEN_WITHIN):
        while True:
            try:
                return await Conversation.open(store, conversation_id, **parts)
            except ConversationBusy:
                await anyio.sleep(0.005)


async def work(mode: str, url: str, conversation_id: str, effects_path: str, name: str, seed: str) -> None:
    pause = Pauses(seed)
    choose = random.Random(f"{seed}/choices")
    effects = Effects(effects_path)
    store = open_store(url)
    await store.conversations()  # connect before the go
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    conversation = await open_conversation(
        store,
        conversation_id,
        agent=NoteAgent(pause),
        domain=domain_for(mode, effects, pause),
        human=PausingHuman(pause),
        timeout=None,
    )
    print("opened", flush=True)
    count = 0
    while True:
        await pause(0.005)
        if conversation.pending and choose.random() < 0.5:
            await conversation.decide(conversation.pending[0].id, Accept())
            continue
        count += 1
        await conversation.say(f"{ASK} {name}-{count}")


def main(argv: list[str]) -> None:
    mode, backend, url, conversation_id, effects, name, seed = argv
    assert Path(effects).exists(), "the test makes the effects database"
    anyio.run(partial(work, mode, url, conversation_id, effects, name, seed), backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
