"""A bad log is refused with one error, whichever door it comes through: a :class:`LogError` naming the entry
(``seq``; ``None`` where the bad line or row gives none, the reason then naming the line), and on the command
line one line on standard error and exit status 1.

Each bad input is a good start of a log (a ``said`` and its ``sent``) followed by one bad line, or a bad header.
It goes through every door that can be handed it: :func:`import_jsonl` (the file), :func:`check_log` and
``Conversation(log=...)`` (entries built in memory), ``Conversation.open`` on a memory and on a SQLite store
seeded with the rows as they are, and the commands that read files (``import``, ``replay --file``) and stores
(``log``, ``export``, ``replay``, ``list``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import trio

from dial_runtime import Conversation, LogEntry, scripted_human
from dial_runtime.agents import ScriptedAgent
from dial_runtime.cli import main
from dial_runtime.demo import NotesDomain
from dial_runtime.errors import LogError
from dial_runtime.runtime.events import ActionStartedEvent, ResumedEvent, SaidEvent
from dial_runtime.stores import MemoryStore, SQLiteStore, open_store
from dial_runtime.stores.jsonl import FORMAT, VERSION, check_log, import_jsonl

RECORDINGS = Path(__file__).parents[1] / "recordings"
HEADER = json.dumps({"format": FORMAT, "version": VERSION, "conversation_id": "bad"})
#: The good start of every bad log: the demo's ``said`` (seq 1) and ``sent`` (seq 2), on lines 2 and 3 of a file.
GOOD = (RECORDINGS / "demo.jsonl").read_text(encoding="utf-8").splitlines()[1:3]
GOOD_ENTRIES = import_jsonl([HEADER, *GOOD])[1]
BAD_LINE = len(GOOD) + 2
DOMAIN = ["--domain", "dial_runtime.demo:NotesDomain"]


def line(seq: Any, event: dict[str, Any], time: float = 3.0) -> str:
    return json.dumps({"seq": seq, "time": time, "event": event})


def entry(seq: int, event: Any, time: float = 3.0) -> LogEntry:
    """A log entry built as a careless caller builds one: msgspec checks no field on construction."""
    return LogEntry(seq=seq, time=time, event=cast(Any, event))


SAID = {"type": "said", "text": "again"}
UNOPENED = {"type": "action-started", "suggestion_id": "sg-9", "action": "add-note", "payload": {}, "preview": "p"}


@dataclasses.dataclass(frozen=True)
class Bad:
    """One bad log: the line after the good start (``None``: the header is the fault), the same fault as an item
    handed to the runtime (``None``: no item has it), the seq the error names and a pattern every door's reason
    matches."""

    text: str | None
    item: Any
    seq: int | None
    says: str
    header: str | None = HEADER  # None: the file has no header line
    folded: bool = False  # well formed: only a fold refuses it, import_jsonl reads it

    def lines(self) -> list[str]:
        head = [] if self.header is None else [self.header]
        return head + GOOD + ([] if self.text is None else [self.text])

    def items(self) -> list[Any]:
        return [*GOOD_ENTRIES, self.item]


BAD = {
    "header missing": Bad(None, None, None, "line 1: not a dial-runtime-log file", header=None),
    "header foreign": Bad(
        None, None, None, "line 1: not a dial-runtime-log file", header=HEADER.replace(FORMAT, "other-log")
    ),
    "header of an unknown version": Bad(
        None,
        None,
        None,
        "line 1: dial-runtime-log version 3 is not supported",
        header=HEADER.replace(": 1", ": 3"),
    ),
    "a line that is not JSON": Bad("{not json", None, None, "not JSON"),
    "a line that is not an entry": Bad("[3, 3.0]", line(3, SAID), None, "not a (log entry|LogEntry)"),
    "an unknown event type": Bad(line(3, {"type": "nope"}), entry(3, {"type": "nope"}), 3, "nope"),
    "an unknown field": Bad(line(3, {**SAID, "colour": 1}), entry(3, {**SAID, "colour": 1}), 3, "colour"),
    "a field of the wrong type": Bad(
        line(3, {**SAID, "text": 3}), entry(3, SaidEvent(text=cast(Any, 3))), 3, "Expected `str`, got `int`"
    ),
    "a word outside its field's vocabulary": Bad(
        line(3, {"type": "resumed", "call": "shout"}),
        entry(3, ResumedEvent(call=cast(Any, "shout"))),
        3,
        "call 'shout' is not one of answer, decide, expire, resume, say",
    ),
    "a time that is not finite": Bad(
        line(3, SAID, math.nan), entry(3, SaidEvent(text="a"), math.nan), 3, "nan.*finite"
    ),
    "a gap in the seqs": Bad(line(4, SAID), entry(4, SaidEvent(text="a")), 4, "expected (seq )?3"),
    "a repeated seq": Bad(line(2, SAID), entry(2, SaidEvent(text="a")), 2, "expected (seq )?3"),
    "an event that cannot stand there": Bad(
        line(3, UNOPENED),
        entry(3, ActionStartedEvent(suggestion_id="sg-9", action="add-note", payload={}, preview="p")),
        3,
        "'sg-9'",
        folded=True,
    ),
}


def refused(case: Bad, door: Callable[[], object], *, at_line: bool = False) -> None:
    """``door`` raises a LogError naming the case's entry (or, with ``at_line``, the bad line)."""
    with pytest.raises(LogError) as raised:
        door()
    error = raised.value
    assert (error.seq, isinstance(error, ValueError)) == (case.seq, True), error
    assert re.search(case.says, error.reason), error
    assert str(error).startswith("the log: " if case.seq is None else f"log entry {case.seq}"), error
    if at_line:
        assert f"line {1 if case.text is None else BAD_LINE}: " in error.reason, error


def _import_then_check(case: Bad) -> None:
    _, entries = import_jsonl(case.lines())
    check_log(entries)


def seeded_sqlite(path: Path, case: Bad) -> str:
    """A SQLite store holding the good start, then the case's bad line as a row at the next seq."""
    url = f"sqlite:{path}"

    async def seed() -> None:
        store = open_store(url)
        try:
            await store.append("bad", GOOD_ENTRIES, expected_seq=0)
        finally:
            await store.aclose()

    trio.run(seed)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO dial_log (conversation_id, seq, time, entry) VALUES (?, ?, ?, ?)",
            ("bad", len(GOOD) + 1, 3.0, case.text),
        )
    connection.close()
    return url


def opened(store: Any) -> Callable[[], object]:
    async def open_it() -> None:
        try:
            await Conversation.open(
                store, "bad", agent=ScriptedAgent([]), domain=NotesDomain(), human=scripted_human([])
            )
        finally:
            await store.aclose()

    return lambda: trio.run(open_it)


def in_memory(case: Bad) -> MemoryStore:
    """A memory store holding the case's items as they are (its append would refuse them: that is another door)."""
    store = MemoryStore()
    store._logs["bad"] = case.items()
    return store


DOORS = ["import_jsonl", "check_log", "Conversation(log=...)", "open: memory", "open: SQLite"]
ITEM_DOORS = {"check_log", "Conversation(log=...)", "open: memory"}
PAIRS = [
    pytest.param(name, door, id=f"{name} | {door}")
    for name, case in BAD.items()
    for door in DOORS
    if (case.item is not None or door not in ITEM_DOORS) and (case.text is not None or door == "import_jsonl")
]


@pytest.mark.parametrize(("name", "door"), PAIRS)
def test_every_door_refuses_a_bad_log_with_a_log_error(name: str, door: str, tmp_path: Path) -> None:
    case = BAD[name]
    if door == "import_jsonl" and case.folded:
        refused(case, lambda: _import_then_check(case))
    elif door == "import_jsonl":
        refused(case, lambda: import_jsonl(case.lines()), at_line=True)
    elif door == "check_log":
        refused(case, lambda: check_log(case.items()))
    elif door == "Conversation(log=...)":
        refused(
            case,
            lambda: Conversation(
                agent=ScriptedAgent([]), domain=NotesDomain(), human=scripted_human([]), log=case.items()
            ),
        )
    elif door == "open: memory":
        refused(case, opened(in_memory(case)))
    else:
        refused(case, opened(SQLiteStore(seeded_sqlite(tmp_path / "logs.db", case).removeprefix("sqlite:"))))


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """Run the command; it must exit 1 with one line on standard error and no traceback. That line, and stdout."""
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err, (status, err)
    assert len(err.splitlines()) == 1 and err.startswith(f"dial-runtime {argv[0]}: "), err
    return err, out


def names_the_entry(case: Bad, said: str) -> None:
    assert ("the log: " if case.seq is None else f"log entry {case.seq}") in said, said
    assert re.search(case.says, said), said


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_file_commands_refuse_a_bad_file_in_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = BAD[name]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(case.lines()) + "\n", encoding="utf-8")
    for argv in (
        ["import", str(path), "--store", f"sqlite:{tmp_path / 'logs.db'}"],
        ["replay", "--file", str(path), *DOMAIN],
    ):
        err, _ = one_line(argv, capsys)
        names_the_entry(case, err)
    assert not (tmp_path / "logs.db").exists(), "nothing is imported from a bad file"


@pytest.mark.parametrize("name", sorted(name for name, case in BAD.items() if case.text is not None))
def test_the_store_commands_refuse_a_bad_stored_log_in_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = BAD[name]
    url = seeded_sqlite(tmp_path / "logs.db", case)
    for argv in (
        ["log", "bad", "--store", url],
        ["export", "bad", "--store", url],
        ["replay", "bad", "--store", url, *DOMAIN],
    ):
        err, out = one_line(argv, capsys)
        assert out == "", "nothing of a refused log is shown"
        names_the_entry(case, err)
    err, out = one_line(["list", "--store", url], capsys)
    assert "1 conversation(s)" in err
    assert out.startswith("bad  refused: "), out
    names_the_entry(case, out)


def test_list_lists_the_other_conversations_beside_one_that_does_not_decode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = seeded_sqlite(tmp_path / "logs.db", BAD["a line that is not JSON"])
    assert main(["import", str(RECORDINGS / "demo.jsonl"), "--store", url]) == 0
    capsys.readouterr()
    _, out = one_line(["list", "--store", url], capsys)
    bad, demo = out.splitlines()
    assert bad.startswith("bad   refused: the log: a stored row is not JSON"), bad
    assert re.fullmatch(r"demo +50 events  last \S+  ended", demo), demo
