"""``dial-runtime audit`` on logs tampered with behind the store's back, on SQLite and PostgreSQL: the report says
first that the log does not match its record (the hash chain names the entry, and a log that no longer folds is
said to), and exits 1; an untouched log's report exits 0 and decodes from JSON.

The conversation is :func:`tests.audit.test_chain.hold`'s: sg-1 accepted by ada at entry 14, sg-2 dismissed by
bob at entry 20.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from dial_runtime.audit import AuditReport

from ..cli.test_chain_cli import cli
from .test_chain import Backend, Postgres, SQLite, Tampering, drop, edit, filled, insert, run, swap

TAMPERINGS: dict[str, Tampering] = {
    "a payload edited": Tampering(edit(5, payload={"text": "wine"}), 5, "edited", "entry 5 was edited"),
    "a decision dropped": Tampering(drop(20, renumber=False), 20, "removed", "entry 20 was removed"),
    "an approval inserted": Tampering(insert(20, "own"), 20, "inserted", "entry 20 was inserted"),
    "two entries reordered": Tampering(
        swap(14, 20, renumber=True, hashes_follow=True), 14, "reordered", "what was entry 20"
    ),
}


@pytest.fixture(params=["sqlite", "postgres"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Backend, str]:
    """A store of each kind holding the conversation, and its URL."""
    backend: Backend
    if request.param == "sqlite":
        backend = SQLite(tmp_path / "logs.db")
        address = f"sqlite:{tmp_path / 'logs.db'}"
    else:
        address = request.getfixturevalue("pg_schema_url")
        backend = Postgres(address)
    run(lambda: filled(backend))
    return backend, address


def test_an_untouched_log_is_audited_in_full(
    stored: tuple[Backend, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, address = stored
    status, out, err = cli(["audit", "c", "--store", address, "--json"], capsys)
    assert (status, err) == (0, "")
    report = msgspec.json.decode(out, type=AuditReport)
    assert report.trustworthy and report.chain is not None and report.chain.ok
    decided = {p.id: [(d.decision, d.by) for d in p.decisions] for p in report.proposals}
    assert decided == {"sg-1": [("accept", "ada")], "sg-2": [("dismiss", "bob")]}
    status, text, _ = cli(["audit", "c", "--store", address], capsys)
    assert status == 0 and text.splitlines()[1].startswith("chain: ok: 27 entries")


@pytest.mark.parametrize("case", TAMPERINGS)
def test_a_tampered_log_is_reported_as_such(
    stored: tuple[Backend, str], case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    backend, address = stored
    tampering = TAMPERINGS[case]
    backend.write(tampering.tamper(backend.read()))
    status, out, err = cli(["audit", "c", "--store", address], capsys)
    assert status == 1, (out, err)
    assert err.count("\n") == 1 and "does not match its record" in err
    lines = out.splitlines()
    assert lines[1].startswith("chain: ") and tampering.says in lines[1], lines[:3]
    assert "WARNING: this log does not match its record" in out
    status, out, _ = cli(["audit", "c", "--store", address, "--json"], capsys)
    report = msgspec.json.decode(out, type=AuditReport)
    assert status == 1 and report.chain is not None and report.chain.broken is not None
    assert (report.chain.broken.seq, report.chain.broken.kind) == (tampering.seq, tampering.kind)


def test_an_unknown_conversation_or_store_is_a_refusal(
    stored: tuple[Backend, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, address = stored
    missing: list[Any] = [
        (["audit", "nope", "--store", address], "holds no conversation 'nope'"),
        (["audit", "c", "--store", f"sqlite:{tmp_path / 'none.db'}"], "no such database file"),
    ]
    for argv, says in missing:
        status, _, err = cli(argv, capsys)
        assert status == 1 and err.count("\n") == 1 and says in err, err  # as log, export and replay say it
