"""The demo's notebook, as a served application holds it: each conversation's notes are its own, rebuilt from its
log (``NotesDomain.from_log``), so they outlive the process on a durable store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dial_runtime import Accept, Conversation, Dismiss, Edit, ScriptedAgent, open_store, scripted_human
from dial_runtime.demo import NotesDomain, notes_in

from ..fakes import envelope, suggest

pytestmark = pytest.mark.anyio
DONE = "<dial/>"


def proposing(action: str, text: str) -> str:
    return envelope(suggest(action, json.dumps({"text": text})))


async def say(store: Any, conversation_id: str, reply: str, decision: Any = None) -> NotesDomain:
    """One ``say`` in the conversation, its notebook rebuilt from its stored log as a new run's would be; the
    notebook after the run."""
    notebook = NotesDomain.from_log(conversation_id, await store.read(conversation_id))
    conversation = await Conversation.open(
        store,
        conversation_id,
        agent=ScriptedAgent([reply, DONE, DONE]),
        domain=notebook,
        human=scripted_human([decision or Accept()]),
    )
    await conversation.say("please")
    return notebook


async def test_each_conversation_has_its_own_notes_and_they_survive_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'notes.db'}"
    store = open_store(url)
    try:
        assert (await say(store, "ada", proposing("add-note", "buy milk"))).notes == ["buy milk"]
        assert (await say(store, "grace", proposing("add-note", "call the dentist"))).notes == ["call the dentist"]
        assert (await say(store, "ada", proposing("add-note", "bake bread"))).notes == ["buy milk", "bake bread"]
    finally:
        await store.aclose()
    restarted = open_store(url)  # a new process: nothing but the store is left
    try:
        ada = await say(restarted, "ada", proposing("remove-note", "buy milk"))
        assert ada.notes == ["bake bread"]
        grace = await say(restarted, "grace", proposing("remove-note", "buy milk"))  # not one of grace's notes
        assert grace.notes == ["call the dentist"]
        assert notes_in(await restarted.read("grace")) == ["call the dentist"]
    finally:
        await restarted.aclose()


@pytest.mark.parametrize(
    ("decision", "notes"),
    [
        (Accept(), ["buy milk"]),
        (Edit({"text": "buy oat milk"}), ["buy oat milk"]),
        (Dismiss(), []),
        (Edit({"text": ""}), []),  # refused three times over: it never ran
    ],
)
async def test_the_notes_are_what_ran(decision: Any, notes: list[str]) -> None:
    store = open_store("memory:")
    try:
        decisions = [decision] * 3
        notebook = NotesDomain.from_log("c", await store.read("c"))
        conversation = await Conversation.open(
            store,
            "c",
            agent=ScriptedAgent([proposing("add-note", "buy milk"), DONE, DONE]),
            domain=notebook,
            human=scripted_human(decisions),
        )
        await conversation.say("add milk")
        assert notebook.notes == notes
        assert NotesDomain.from_log("c", await store.read("c")).notes == notes
    finally:
        await store.aclose()
