"""A conversation's log as JSON Lines: a header line naming the format and the conversation, then one entry a line.

The file moves a conversation between stores, and keeps recordings that :func:`dial_runtime.replay.replay` runs
again. Entries are written with JSON's ASCII escapes, so every value (lone surrogates and ``NaN`` included) reads
back exactly.

Version 1 (:func:`export_jsonl`): each line is an entry as :func:`~dial_runtime.runtime.events.entry_to_dict`
makes it. Version 2 (:func:`export_rows`, what ``dial-runtime export`` writes): each line is a stored entry as
its store holds it, with the entry's hash in a ``hash`` field (see :mod:`dial_runtime.stores.chain`; an entry
stored before the chain existed has none). Reading a version-2 file checks its hash chain first, and refuses a
broken one naming the first entry that does not match; version-1 files read as they always did.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import IO, Any

import msgspec

from ..errors import LogError
from ..runtime.events import Event, LogEntry, entry_to_dict, event_from_dict
from ..runtime.state import fold_log
from .chain import ChainCheck, StoredRow, verify_log

#: The header's ``format``; a file without it is not a conversation log.
FORMAT = "dial-runtime-log"

#: The header's ``version`` of a file of entries without hashes (what :func:`export_jsonl` writes).
VERSION = 1

#: The header's ``version`` of a file of stored entries with their hashes (what :func:`export_rows` writes).
CHAINED_VERSION = 2

#: The versions this module reads.
VERSIONS = (VERSION, CHAINED_VERSION)


class LogFile(msgspec.Struct, frozen=True):
    """What a JSON Lines log holds: its conversation id, its entries, the lines as stored rows (their entries as
    the file has them, with their hashes), and its verified chain (``None`` for a version-1 file, which has no
    hashes)."""

    conversation_id: str
    entries: list[LogEntry]
    rows: list[StoredRow]
    chain: ChainCheck | None


def export_jsonl(entries: Iterable[LogEntry], file: IO[str], *, conversation_id: str) -> None:
    """Write the header line, then one line per entry, to the text file ``file`` (version 1: no hashes)."""
    header = {"format": FORMAT, "version": VERSION, "conversation_id": conversation_id}
    file.write(json.dumps(header) + "\n")
    for entry in entries:
        file.write(json.dumps(entry_to_dict(entry), separators=(",", ":")) + "\n")


def export_rows(rows: Iterable[StoredRow], file: IO[str], *, conversation_id: str) -> None:
    """Write the header line, then one line per stored row, to the text file ``file`` (version 2): each the
    entry's dict as stored, with its ``hash`` when it has one. :class:`~dial_runtime.LogError` for a row that
    is not a log entry's dict (nothing more is written)."""
    header = {"format": FORMAT, "version": CHAINED_VERSION, "conversation_id": conversation_id}
    file.write(json.dumps(header) + "\n")
    for row in rows:
        data = row.entry
        if not isinstance(data, dict) or "hash" in data:
            raise LogError(row.seq, None, "the stored row is not a log entry's dict")
        if row.hash is not None:
            data["hash"] = row.hash
        file.write(json.dumps(data, separators=(",", ":")) + "\n")


def import_jsonl(file: Iterable[str]) -> tuple[str, list[LogEntry]]:
    """The conversation id and the entries :func:`export_jsonl` or :func:`export_rows` wrote.

    :class:`~dial_runtime.LogError`, its reason naming the line, for a missing or foreign header, an unknown
    version, a version-2 file whose hash chain is broken (the first entry that does not match, and how), a line
    that is not JSON or not a log entry (an unknown event type or field, a field of the wrong type, a time that
    is not a finite number, a word outside its field's vocabulary), and for entries not numbered 1, 2, 3, ... (a
    log has no gaps); its ``seq`` and ``event_type`` are the entry's as far as the line gives them (``None`` for
    the header and the chain). Blank lines are skipped. Whether the entries make a conversation is
    :func:`check_log`'s question.
    """
    read = read_jsonl(file)
    return read.conversation_id, read.entries


def read_jsonl(file: Iterable[str]) -> LogFile:
    """Everything a JSON Lines log holds (see :class:`LogFile`), refused as :func:`import_jsonl` refuses it."""
    conversation_id: str | None = None
    version = VERSION
    numbers: list[int] = []
    rows: list[StoredRow] = []
    read: list[LogEntry] = []
    number = 0
    for number, line in enumerate(file, start=1):
        if not line.strip():
            continue
        data = _json(line, number)
        if conversation_id is None:
            conversation_id, version = _header(data, number)
            continue
        numbers.append(number)
        rows.append(_row(data, number, len(rows) + 1, version))  # takes out the hash (version 2)
        read.append(_line_entry(data, number))
        if version == VERSION:  # refused at its first bad line
            _numbered(read[-1], number, len(read))
    if conversation_id is None:
        raise LogError(None, None, f"line {number + 1}: the file is empty; expected a {FORMAT} header")
    chain = None
    if version == CHAINED_VERSION:  # the chain before the numbering: it says best what happened to a line
        chain = verify_log(rows, conversation_id=conversation_id)
        if chain.broken is not None:
            at = numbers[min(chain.broken.seq, len(numbers)) - 1]
            raise LogError(None, None, f"line {at}: the hash chain is broken: {chain.broken}")
        for index, entry in enumerate(read):
            _numbered(entry, numbers[index], index + 1)
    return LogFile(conversation_id, read, rows, chain)


def _numbered(entry: LogEntry, number: int, expected: int) -> None:
    """Refuse ``entry`` unless it is numbered ``expected`` (a log has no gaps)."""
    if entry.seq != expected:
        raise LogError(
            entry.seq, entry.event.type, f"line {number}: entry has seq {entry.seq}, expected {expected}"
        )


def _row(data: Any, number: int, index: int, version: int) -> StoredRow:
    """A line as a stored row: its entry's dict as the file has it, and (version 2) the hash it carries, taken
    out of the dict, which is then the entry as it was stored."""
    hash_: Any = None
    if version == CHAINED_VERSION and isinstance(data, dict) and "hash" in data:
        hash_ = data.pop("hash")
        if not isinstance(hash_, str):
            raise LogError(None, None, f"line {number}: not a log entry (its hash is {hash_!r}, not a string)")
    own = data.get("seq") if isinstance(data, dict) else None
    seq = own if isinstance(own, int) and not isinstance(own, bool) else index
    return StoredRow.of(seq, data, hash_)


def _json(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as error:
        raise LogError(None, None, f"line {number}: not JSON ({error})") from None


def _header(data: Any, number: int) -> tuple[str, int]:
    """The conversation id and the version of a valid header line."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise LogError(None, None, f"line {number}: not a {FORMAT} file (the first line must be its header)")
    version = data.get("version")
    if version not in VERSIONS or isinstance(version, bool) or not isinstance(version, int):
        known = " and ".join(str(known) for known in VERSIONS)
        unknown = f"{FORMAT} version {version!r} is not supported (only {known})"
        raise LogError(None, None, f"line {number}: {unknown}")
    conversation_id = data.get("conversation_id")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise LogError(None, None, f"line {number}: the header has no conversation_id")
    return conversation_id, version


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
