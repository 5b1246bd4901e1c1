"""The shipped example: a notes domain, a recorded agent and a scripted person, printed as a transcript.

``dial-runtime demo`` runs it; nothing goes over the network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from .agents import ScriptedAgent
from .runtime import ActionError, ActionSpec, Conversation, scripted_human
from .transcript import NarratedHuman, Transcript


class NotesDomain:
    """A small notebook: add, remove, list and share notes."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        "add-note": ActionSpec(mutates=True),
        "remove-note": ActionSpec(mutates=True, destructive=True),
        "list-notes": ActionSpec(mutates=False),
        "share-note": ActionSpec(mutates=False, handoff=True),
    }

    def __init__(self) -> None:
        self.notes: list[str] = []

    def validate(self, action: str, payload: Any) -> dict[str, Any]:
        if action in ("add-note", "remove-note", "share-note"):
            text = payload.get("text") if isinstance(payload, dict) else None
            if not isinstance(text, str) or not text.strip():
                return {"ok": False, "code": "missing-text", "field": "text", "hint": "Give the note's text."}
            if len(text) > 60:
                return {"ok": False, "code": "too-long", "field": "text", "hint": "Keep a note under 60 chars."}
        return {"ok": True}

    def preview(self, action: str, payload: Any) -> str:
        text = payload.get("text", "") if isinstance(payload, dict) else ""
        return {
            "add-note": f"Add the note '{text}'",
            "remove-note": f"Remove the note '{text}'",
            "list-notes": "List the notes",
            "share-note": f"Share the note '{text}'",
        }[action]

    def run(self, action: str, payload: Any) -> Any:
        if action == "add-note":
            self.notes.append(payload["text"])
            return {"count": len(self.notes)}
        if action == "remove-note":
            if payload["text"] not in self.notes:
                raise ActionError("no such note", code="not-found", field="text", hint="List the notes first.")
            self.notes.remove(payload["text"])
            return {"count": len(self.notes)}
        if action == "list-notes":
            return {"notes": list(self.notes)}
        return {"shared": payload["text"]}

    def context(self) -> str:
        return f'<context notes="{len(self.notes)}"/>'


#: What the person says, and what the recorded agent replied to each turn.
SCRIPT: list[tuple[str, list[str]]] = [
    (
        "add a note: buy milk",
        [
            "Sure, here is the note.\n<dial>\n"
            '  <dial-suggest action="add-note">Add "buy milk" to your notes</dial-suggest>\n'
            '  <dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare>\n'
            "</dial>",
            '<dial>\n  <dial-acknowledge of="sg-1">Added. You have 1 note.</dial-acknowledge>\n</dial>',
        ],
    ),
    (
        "add one for the dentist, and tidy up",
        [
            "<dial>\n"
            '  <dial-suggest action="add-note">Add a dentist reminder'
            '<dial-payload>{"text":"call the dentist"}</dial-payload></dial-suggest>\n'
            '  <dial-suggest action="remove-note">Remove the milk note'
            '<dial-payload>{"text":"buy milk"}</dial-payload></dial-suggest>\n'
            '  <dial-suggest action="list-notes"><dial-payload>{}</dial-payload></dial-suggest>\n'
            "</dial>",
            "<dial>\n"
            "  <dial-inform>Done: the dentist note is in, the milk note stays; you have 2 notes.</dial-inform>\n"
            '  <dial-ask response-type="choice">Shall I share one of them?'
            '<dial-option value="dentist">The dentist note</dial-option>'
            '<dial-option value="none" default="true">Neither</dial-option></dial-ask>\n'
            "</dial>",
            "<dial>\n"
            '  <dial-suggest action="share-note"><dial-payload>{"text":"call the dentist today"}</dial-payload>'
            "</dial-suggest>\n"
            '  <dial-phatic signal="session-complete"/>\n'
            "</dial>",
        ],
    ),
]

#: The person's decisions and answers, in the order the conversation asks for them.
DECISIONS: list[Any] = [
    "accept",
    {"edit": {"text": "call the dentist before the long weekend, about the crown, in the morning"}},
    {"edit": {"text": "call the dentist"}},
    "dismiss",
    {"answer": "dentist"},
]


async def run_demo(write: Callable[[str], object] = print) -> Conversation:
    """Hold the demo conversation, writing the transcript line by line; return the conversation."""
    replies = [reply for _, turn_replies in SCRIPT for reply in turn_replies]
    transcript = Transcript(write)
    conversation = Conversation(
        agent=ScriptedAgent(replies),
        domain=NotesDomain(),
        human=NarratedHuman(scripted_human(DECISIONS), transcript),
        on_event=transcript.show,
    )
    for words, _ in SCRIPT:
        transcript.person(words)
        result = await conversation.say(words)
        transcript.result(result)
    return conversation
