"""The shipped example: a notes domain, a recorded agent and a scripted person, printed as a transcript.

``dial-runtime demo`` runs it; nothing goes over the network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any

import msgspec

from .agents import ScriptedAgent
from .domains import Domain
from .driver import Conversation, scripted_human
from .runtime import ActionError, Issue
from .runtime.events import LogEntry
from .terminal.transcript import NarratedHuman, Transcript
from .views.person import Card, project

NoteText = Annotated[str, msgspec.Meta(min_length=1, max_length=60, pattern=r"\S")]
"""A note: some text that is not only spaces, at most 60 characters."""


class NotesDomain(Domain):
    """A small notebook: add, remove, list and share notes. Each call makes a new notebook holding ``notes``
    (none by default); :meth:`from_log` makes one conversation's, as its log left it."""

    def __init__(self, notes: Iterable[str] = ()) -> None:
        super().__init__("notes", description="A small notebook: the person keeps short notes in it.")
        self.notes: list[str] = list(notes)
        notes = self.notes

        @self.action(preview="Add the note '{text}'")
        def add_note(text: NoteText) -> dict[str, int]:
            """Add a note to the notebook."""
            notes.append(text)
            return {"count": len(notes)}

        def existing(text: str) -> Issue | None:
            if text in notes:
                return None
            return Issue(code="not-found", field="text", hint="List the notes first and use a note's exact text.")

        @self.action(destructive=True, check=existing, preview="Remove the note '{text}'")
        def remove_note(text: NoteText) -> dict[str, int]:
            """Remove a note, given its exact text."""
            if text not in notes:  # removed since it was checked
                raise ActionError("no such note", code="not-found", field="text", hint="List the notes first.")
            notes.remove(text)
            return {"count": len(notes)}

        @self.action(read_only=True, preview="List the notes")
        def list_notes() -> dict[str, list[str]]:
            """List every note, oldest first."""
            return {"notes": list(notes)}

        @self.action(handoff=True, preview="Share the note '{text}'")
        def share_note(text: NoteText) -> dict[str, str]:
            """Open the sharing panel for a note; the person picks whom to share it with there."""
            return {"shared": text}

        @self.context
        def count() -> str:
            return f'<context notes="{len(notes)}"/>'

    @classmethod
    def from_log(cls, conversation_id: str, log: Sequence[LogEntry]) -> NotesDomain:
        """The notebook of one conversation: the notes its log says were added and not removed since (see
        :func:`notes_in`). So each conversation has notes of its own, and they outlive the process that held
        them wherever the log does (a SQLite or PostgreSQL store): the log is their only record."""
        return cls(notes_in(log))


def notes_by_conversation() -> Callable[[str, Sequence[LogEntry]], NotesDomain]:
    """The notes domain as a domain factory, :meth:`NotesDomain.from_log`: what ``dial-runtime serve --domain
    dial_runtime.demo:notes_by_conversation`` loads, to give each conversation its own notebook."""
    return NotesDomain.from_log


def notes_in(log: Sequence[LogEntry]) -> list[str]:
    """The notes a conversation's log leaves: each ``add-note`` and ``remove-note`` that ended ``done``, applied
    in order with the payload that ran (an edited one included)."""
    done = [item for item in project(log).items if isinstance(item, Card) and item.status == "done"]
    notes: list[str] = []
    for card in sorted(done, key=lambda card: card.ended_seq or 0):  # in the order they ran, not were proposed
        text = card.payload.get("text") if isinstance(card.payload, dict) else None
        if card.action == "add-note" and isinstance(text, str):
            notes.append(text)
        elif card.action == "remove-note" and text in notes:
            notes.remove(text)
    return notes


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
