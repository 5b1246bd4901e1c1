"""The person at the terminal answering what an MCP server asks in the middle of a tool call (elicitation).

Each question is a card of :mod:`dial_runtime.doors.elicitation`; here it is put as a form: the question, then each
field in turn (a choice by its number, yes or no, a number, text), an empty line taking the field's default.
``/decline`` declines the question, ``/cancel`` (or Ctrl-D) cancels it; a page to open is accepted with ``yes``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ..runtime.records import Decision, Dismiss, Edit, Say, Suggestion

if TYPE_CHECKING:
    from .surface import TerminalSurface

__all__ = ["ServerQuestions"]

_YES = {"y", "yes", "true"}
_NO = {"n", "no", "false"}


class _Withdrawn(Exception):
    """The person declined (``decision``: a dismissal) or cancelled (a word said instead) the question."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision


class ServerQuestions:
    """A person for the questions' cards, at the terminal of ``surface`` (give it to
    :class:`~dial_runtime.doors.elicitation.Elicitations` as ``human``)."""

    def __init__(self, surface: TerminalSurface) -> None:
        self.surface = surface

    async def decide(self, suggestion: Suggestion) -> Decision:
        """The person's answer as an edit of the card (the form filled in), a dismissal (declined), or words
        said instead (cancelled)."""
        payload = suggestion.payload if isinstance(suggestion.payload, Mapping) else {}
        surface = self.surface
        asker = f"the MCP server, running {payload['tool']}," if payload.get("tool") else "the MCP server"
        surface.note(f"   {asker} asks: {payload.get('question', '')}", "bold cyan")
        if suggestion.issue is not None:
            surface.note(f"   the answer was refused: {suggestion.issue.hint or suggestion.issue.code}", "red")
        try:
            if "url" in payload:
                surface.note(f"   it asks you to open {payload['url']}", "cyan")
                return await self._open(suggestion)
            answer = await self._form(payload.get("form") or {})
        except _Withdrawn as withdrawn:
            return withdrawn.decision
        surface.note(f"   you answer: {json.dumps(answer, ensure_ascii=False)}", "dim")
        return Edit({**payload, "answer": answer})

    def answer(self, ask: Any) -> None:
        """A question's card asks nothing further."""
        return None

    async def _open(self, suggestion: Suggestion) -> Decision:
        while True:
            given = (await self._line("open it? yes, or /decline, /cancel: ")).lower()
            if given in _YES:
                return Edit(suggestion.payload)
            if given in _NO:
                return Dismiss()
            self.surface.console.print(Text("Type yes, /decline or /cancel.", style="yellow"))

    async def _form(self, form: Mapping[str, Any]) -> dict[str, Any]:
        listed, named = form.get("properties"), form.get("required")
        properties: Mapping[str, Any] = listed if isinstance(listed, Mapping) else {}
        required: list[Any] = named if isinstance(named, list) else []
        answer: dict[str, Any] = {}
        for name, field in properties.items():
            value = await self._field(name, field if isinstance(field, Mapping) else {}, name in required)
            if value is not None:
                answer[name] = value
        return answer

    async def _field(self, name: str, field: Mapping[str, Any], required: bool) -> Any:
        """One field's value, asked again until it reads as its type; ``None``: left out (optional, no default)."""
        choices = _choices(field)
        title = str(field.get("title") or name)
        notes = [str(field["description"])] if field.get("description") else []
        if choices:
            notes.append(", ".join(f"{number} {label}" for number, (_, label) in enumerate(choices, 1)))
        if "default" in field:
            notes.append(f"Enter for {json.dumps(field['default'], ensure_ascii=False)}")
        elif not required:
            notes.append("Enter to leave it out")
        shown = f"{title}{' (required)' if required else ''}" + (f" [{'; '.join(notes)}]" if notes else "") + ": "
        while True:
            given = await self._line(shown)
            if not given:
                if "default" in field:
                    return field["default"]
                if not required:
                    return None
                self.surface.console.print(Text("This one is required.", style="yellow"))
                continue
            value = _read(given, field, choices)
            if value is not None:
                return value
            self.surface.console.print(Text(f"That is not {_kind(field)}.", style="yellow"))

    async def _line(self, message: str) -> str:
        given = (await self.surface._prompt("menu", f"   {message}", leave=True)).strip()
        if given == "/decline":
            self.surface.note("   you decline the question", "dim")
            raise _Withdrawn(Dismiss())
        if given in ("/cancel", "/quit", "/later"):
            self.surface.note("   you cancel the question", "dim")
            raise _Withdrawn(Say("(the person cancelled the question)"))
        return given


def _choices(field: Mapping[str, Any]) -> list[tuple[Any, str]]:
    """A choice field's values and labels (``enum``, or ``oneOf``/``anyOf`` of ``const`` with a ``title``); for a
    field of several choices, its items'."""
    items = field.get("items")
    source = items if field.get("type") == "array" and isinstance(items, Mapping) else field
    if isinstance(source.get("enum"), list):
        labels = field.get("enumNames")
        names: list[Any] = labels if isinstance(labels, list) else []
        return [(value, str(names[i]) if i < len(names) else str(value)) for i, value in enumerate(source["enum"])]
    options = source.get("oneOf") or source.get("anyOf") or []
    return [
        (option["const"], str(option.get("title", option["const"])))
        for option in options
        if isinstance(option, Mapping) and "const" in option
    ]


def _read(given: str, field: Mapping[str, Any], choices: list[tuple[Any, str]]) -> Any:
    """``given`` as the field's value, or ``None`` when it does not read as one."""
    kind = field.get("type")
    if kind == "array":
        picked = [_choice(part.strip(), choices) for part in given.split(",") if part.strip()]
        return None if any(value is None for value in picked) else picked
    if choices:
        return _choice(given, choices)
    if kind == "boolean":
        word = given.lower()
        return True if word in _YES else False if word in _NO else None
    if kind in ("integer", "number"):
        try:
            return int(given)
        except ValueError:
            pass
        if kind == "number":
            try:
                return float(given)
            except ValueError:
                return None
        return None
    return given


def _choice(given: str, choices: list[tuple[Any, str]]) -> Any:
    for number, (value, label) in enumerate(choices, 1):
        if given in (str(number), str(value), label):
            return value
    return None


def _kind(field: Mapping[str, Any]) -> str:
    kind = field.get("type")
    if _choices(field):
        return "one of the choices"
    return {"boolean": "yes or no", "integer": "a whole number", "number": "a number"}.get(str(kind), "text")
