"""A conversation's log as JSON Lines: a header line naming the format and the conversation, then one entry a line.

The file moves a conversation between stores, and keeps recordings that :func:`dial_runtime.replay.replay` runs
again. Entries are written as :func:`~dial_runtime.runtime.events.entry_to_dict` makes them, with JSON's ASCII
escapes, so every value (lone surrogates and ``NaN`` included) reads back exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import IO, Any

import msgspec

from .errors import LogError
from .runtime.events import Event, LogEntry, entry_to_dict, event_from_dict
from .runtime.state import fold_log

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

    :class:`~dial_runtime.LogError`, its reason naming the line, for a missing or foreign header, an unknown
    version, a line that is not JSON or not a log entry (an unknown event type or field, a field of the wrong
    type, a time that is not a finite number, a word outside its field's vocabulary), and for entries not
    numbered 1, 2, 3, ... (a log has no gaps); its ``seq`` and ``event_type`` are the entry's as far as the line
    gives them (``None`` for the header). Blank lines are skipped. Whether the entries make a conversation is
    :func:`check_log`'s question.
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
        entry, expected = _line_entry(data, number), len(entries) + 1
        if entry.seq != expected:
            raise LogError(
                entry.seq, entry.event.type, f"line {number}: entry has seq {entry.seq}, expected {expected}"
            )
        entries.append(entry)
    if conversation_id is None:
        raise LogError(None, None, f"line {number + 1}: the file is empty; expected a {FORMAT} header")
    return conversation_id, entries


def _json(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as error:
        raise LogError(None, None, f"line {number}: not JSON ({error})") from None


def _header(data: Any, number: int) -> str:
    """The conversation id of a valid header line."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LogError(None, None, f"line {number}: not a {FORMAT} file (the first line must be its header)")
    version = data.get("version")
    if version != VERSION or isinstance(version, bool):
        unknown = f"{FORMAT} version {version!r} is not supported (only {VERSION})"
        raise LogError(None, None, f"line {number}: {unknown}")
    conversation_id = data.get("conversation_id")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise LogError(None, None, f"line {number}: the header has no conversation_id")
    return conversation_id


def _line_entry(data: Any, number: int) -> LogEntry:
    """The entry on line ``number``; a :class:`LogError` naming the line, and the entry as far as it can."""
    try:
        return _entry(data)
    except (KeyError, TypeError, ValueError, msgspec.ValidationError) as error:
        seq = data.get("seq") if isinstance(data, dict) else None
        fields = data.get("event") if isinstance(data, dict) else None
        kind = fields.get("type") if isinstance(fields, dict) else None
        raise LogError(
            seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            kind if isinstance(kind, str) else None,
            f"line {number}: not a log entry ({type(error).__name__}: {error})",
        ) from None


def _entry(data: Any) -> LogEntry:
    """A log entry from its JSON form, every field checked against its declared type."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, got {type(data).__name__}")
    unknown = set(data) - {"seq", "time", "event"}
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}")
    seq, when, fields = data["seq"], data["time"], data["event"]
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise TypeError(f"seq is {seq!r}, not an integer")
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not math.isfinite(when):
        raise TypeError(f"time is {when!r}, not a finite number of seconds")
    return LogEntry(seq=seq, time=float(when), event=_event(fields))


def _event(fields: Any) -> Event:
    if not isinstance(fields, dict):
        raise TypeError(f"event is {type(fields).__name__}, not an object")
    try:
        return event_from_dict(fields)
    except msgspec.ValidationError as error:
        raise ValueError(f"{fields.get('type')} event: {error}") from None


def check_log(entries: Iterable[object]) -> None:
    """Refuse entries no run of the runtime could have written, as the conversation's own fold does
    (:func:`~dial_runtime.runtime.state.fold_log`): the first it refuses (an action started for a suggestion
    never made, a decision where none was asked for, a reply with no message before it, an item that is not a
    log entry) is a :class:`~dial_runtime.LogError` naming its seq, its type and why."""
    fold_log(entries)
