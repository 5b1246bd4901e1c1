"""Domains the web tests serve, in-process and from a separate process (``--domain tests.web_domains:...``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import anyio

from dial_runtime import ActionError, ActionSpec


class WebNotes:
    """A small notebook (add, remove, list, share notes) whose refusals and previews the web tests spell out."""

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


class StuckNotes(WebNotes):
    """The notebook, whose actions never finish: a worker killed while one runs leaves its effect unknown."""

    async def run(self, action: str, payload: Any) -> Any:  # type: ignore[override]
        await anyio.sleep_forever()


class TellingStuckNotes(WebNotes):
    """The notebook, whose actions never finish and first write the worker's pid to the file
    ``DIAL_TEST_RUNNING_PID`` names: the test kills the worker that runs one."""

    async def run(self, action: str, payload: Any) -> Any:  # type: ignore[override]
        Path(os.environ["DIAL_TEST_RUNNING_PID"]).write_text(str(os.getpid()))
        await anyio.sleep_forever()
