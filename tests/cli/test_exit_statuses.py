"""One table of exit statuses for every command (the CLI's docs give the same table): 0 done; 1 carried out and
the answer is no (an invalid document, a store that cannot be read or does not hold the conversation, a decision
refused, a chain that does not match, an agent or a domain that failed); 2 the command line cannot be carried out
as written (an option, a value, or a file, module or agent URI it names). Every failure is one line on standard
error, without an exception's class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dial_runtime.cli import main
from dial_runtime.demo import NotesDomain

from .test_decide_command import ACK, PROPOSE, store_waiting


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A folder with ``c.db`` (conversation ``c-1``, its notes domain's card ``sg-1`` waiting), ``replies.json``,
    and envelopes: ``good.xml``, ``bad-json.xml`` (a JSON payload that is not JSON)."""

    store_waiting(tmp_path / "c.db", NotesDomain())
    (tmp_path / "replies.json").write_text(json.dumps([PROPOSE, ACK]), encoding="utf-8")
    (tmp_path / "good.xml").write_text("<dial><dial-inform>hi</dial-inform></dial>", encoding="utf-8")
    (tmp_path / "bad-json.xml").write_text(
        '<dial><dial-suggest action="add-note">Add it.<dial-payload>{not json</dial-payload>'
        "</dial-suggest></dial>",
        encoding="utf-8",
    )
    return tmp_path


STORE = "sqlite:{place}/c.db"
#: (the command line, with {place} for the fixture's folder; its status; what its one line says, or its output)
CASES: list[tuple[str, int, str]] = [
    ("--version", 0, "dial-runtime 0.1"),
    ("validate {place}/good.xml", 0, "valid DIAL"),
    ("validate {place}/bad-json.xml", 1, "not valid JSON"),
    ("validate {place}/missing.xml", 2, "cannot read"),
    (f"log --store {STORE} nope", 1, "holds no conversation 'nope'"),
    (f"export --store {STORE} nope", 1, "holds no conversation 'nope'"),
    (f"replay --store {STORE} nope", 1, "holds no conversation 'nope'"),
    (f"audit --store {STORE} nope", 1, "holds no conversation 'nope'"),
    (f"verify --store {STORE} nope", 1, "holds no conversation 'nope'"),
    (f"verify --store {STORE} c-1", 0, "c-1"),
    ("log --store sqlite:{place}/absent.db c-1", 1, "no such database file"),
    ("audit --store sqlite:{place}/absent.db c-1", 1, "no such database file"),
    ("chat --agent script:{place}/missing.json --domain dial_runtime.demo:NotesDomain", 2, "cannot read"),
    ("chat --agent bogus:thing --domain dial_runtime.demo:NotesDomain", 2, "unknown scheme 'bogus'"),
    (f"eval --store {STORE} --candidate script:{{place}}/missing.json", 2, "cannot read"),
    (f"eval --store {STORE} --candidate bogus:thing", 2, "unknown scheme 'bogus'"),
    ("eval --log {place}/missing.jsonl --candidate script:{place}/replies.json", 2, "cannot read"),
    (
        f"decide c-1 sg-1 accept --store {STORE} --agent script:{{place}}/replies.json "
        "--domain dial_runtime.demo:notes_by_conversation --as ana",
        0,
        "sg-1: Done",
    ),
    (
        f"decide c-1 sg-9 accept --store {STORE} --agent script:{{place}}/replies.json "
        "--domain dial_runtime.demo:NotesDomain",
        1,
        "'sg-9' is not awaiting",
    ),
    (
        f"decide c-1 sg-1 accept --store {STORE} --agent script:{{place}}/replies.json --domain nowhere:x",
        2,
        "nowhere",
    ),
]


@pytest.mark.parametrize(
    ("line", "status", "says"), CASES, ids=[case[0].split()[0] + str(n) for n, case in enumerate(CASES)]
)
def test_every_command_exits_by_one_table(
    place: Path, capsys: pytest.CaptureFixture[str], line: str, status: int, says: str
) -> None:
    argv = line.format(place=place).split()
    try:
        done = main(argv)
    except SystemExit as exited:  # argparse's own exits (--version, usage)
        done = int(exited.code or 0)
    out, err = capsys.readouterr()
    assert done == status, (out, err)
    if status == 0:
        assert says in out and err == "", (out, err)
        return
    lines = err.splitlines()
    if not lines:  # validate reports a document's problems as its output, a line each
        assert argv[0] == "validate" and says in out, out
        return
    assert len(lines) == 1 and says in lines[0], err
    assert "Error:" not in lines[0] and "Traceback" not in err, lines[0]
