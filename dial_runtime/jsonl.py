"""A conversation's log as JSON Lines: a header line naming the format and the conversation, then one entry a line.

The file moves a conversation between stores, and keeps recordings that :func:`dial_runtime.replay.replay` runs
again. Entries are written as :func:`~dial_runtime.runtime.events.entry_to_dict` makes them, with JSON's ASCII
escapes, so every value (lone surrogates and ``NaN`` included) reads back exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

from .runtime.events import LogEntry, entry_from_dict, entry_to_dict

#: The header's ``format``; a file without it is not a conversation log.
FORMAT = "dial-runtime-log"

#: The header's ``version``: the layout of the lines that follow it.
VERSION = 1


def export_jsonl(entries: Iterable[LogEntry], file: IO[str], *, conversation_id: str) -> None:
    """Write the header line, then one line per entry, to the text file ``file``."""
    header = {"format": FORMAT, "version": VERSION, "conversation_id": conversation_id}
    file.write(json.dumps(header) + "\n")
    for entry in entries:
        file.write(json.dumps(entry_to_dict(entry), separators=(",", ":")) + "\n")


def import_jsonl(file: Iterable[str]) -> tuple[str, list[LogEntry]]:
    """The conversation id and the entries :func:`export_jsonl` wrote.

    ``ValueError`` naming the line for a missing or foreign header, an unknown version, a line that is not JSON
    or not a log entry, and for entries not numbered 1, 2, 3, ... (a log has no gaps). Blank lines are skipped.
    """
    conversation_id: str | None = None
    entries: list[LogEntry] = []
    number = 0
    for number, line in enumerate(file, start=1):
        if not line.strip():
            continue
        data = _json(line, number)
        if conversation_id is None:
            conversation_id = _header(data, number)
            continue
        try:
            entry = entry_from_dict(data)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"line {number}: not a log entry ({type(error).__name__}: {error})") from None
        if entry.seq != len(entries) + 1:
            raise ValueError(f"line {number}: entry has seq {entry.seq}, expected {len(entries) + 1}")
        entries.append(entry)
    if conversation_id is None:
        raise ValueError(f"line {number + 1}: the file is empty; expected a {FORMAT} header")
    return conversation_id, entries


def _json(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as error:
        raise ValueError(f"line {number}: not JSON ({error})") from None


def _header(data: Any, number: int) -> str:
    """The conversation id of a valid header line."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"line {number}: not a {FORMAT} file (the first line must be its header)")
    version = data.get("version")
    if version != VERSION or isinstance(version, bool):
        raise ValueError(f"line {number}: {FORMAT} version {version!r} is not supported (only {VERSION})")
    conversation_id = data.get("conversation_id")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError(f"line {number}: the header has no conversation_id")
    return conversation_id
