"""``dial-runtime decide``: a decision taken from the command line on what waits in a stored conversation is the
same decision the panel or the terminal takes: logged with who (``--as``) and ``via: cli``, checked the same way
(a second decision is refused, a payload that changed since it was seen is refused), and the conversation carries
on with its agent; an approval policy counts it as one approval."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from dial_runtime import Conversation, scripted_human
from dial_runtime.runtime.events import DecidedEvent, LogEntry
from dial_runtime.stores import SQLiteStore

from ..fakes import Agent, Notes, OpsNotes, envelope, suggest
from .test_chain_cli import cli

PROPOSE = envelope(suggest("add-note", '{"text": "milk"}'))
ACK = envelope("<dial-acknowledge>Added.</dial-acknowledge>")


def store_waiting(db: Path, domain: object) -> str:
    """A SQLite store at ``db`` whose conversation ``c-1``, on ``domain``, waits for a decision on sg-1 (an
    ``add-note``, asked for by ada): its URL."""

    async def make() -> None:
        store = SQLiteStore(db)
        try:
            conversation = await Conversation.open(
                store, "c-1", agent=Agent([PROPOSE]), domain=domain, human=scripted_human(["defer"])
            )
            assert (await conversation.say("add milk", by="ada")).status == "awaiting"
        finally:
            await store.aclose()

    anyio.run(make)
    return f"sqlite:{db}"


@pytest.fixture
def waiting(tmp_path: Path) -> tuple[str, Path]:
    """A SQLite store whose conversation ``c-1`` waits for a decision on sg-1, and the agent's script."""
    url = store_waiting(tmp_path / "c.db", Notes())
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([PROPOSE, ACK]), encoding="utf-8")
    return url, script


def stored(url: str) -> list[LogEntry]:
    async def read() -> list[LogEntry]:
        store = SQLiteStore(url.removeprefix("sqlite:"))
        try:
            return await store.read("c-1")
        finally:
            await store.aclose()

    return anyio.run(read)


def test_a_decision_from_the_command_line_is_the_panels_decision(
    waiting: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, script = waiting
    argv = ["--store", url, "--agent", f"script:{script}", "--domain", "tests.fakes:Notes"]
    status, out, err = cli(["decide", "c-1", "sg-1", "accept", *argv, "--as", "bob"], capsys)
    assert (status, err) == (0, "")
    assert out == "sg-1: Done; the call ended idle\n"
    (decided,) = [e.event for e in stored(url) if isinstance(e.event, DecidedEvent)]
    assert (decided.decision, decided.by, decided.via) == ("accept", "bob", "cli")
    status, _, err = cli(["decide", "c-1", "sg-1", "dismiss", *argv], capsys)
    assert status == 1 and err.count("\n") == 1 and "already decided" in err, err


def test_a_stale_digest_or_a_bad_edit_is_refused_in_one_line(
    waiting: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, script = waiting
    argv = ["--store", url, "--agent", f"script:{script}", "--domain", "tests.fakes:Notes"]
    status, _, err = cli(["decide", "c-1", "sg-1", "accept", *argv, "--shown", "sha256:" + "0" * 64], capsys)
    assert status == 1 and "not the one waiting" in err, err
    status, _, err = cli(["decide", "c-1", "sg-1", "edit", *argv], capsys)
    assert status == 2 and "--payload" in err, err
    status, _, err = cli(["decide", "c-1", "sg-1", "edit", *argv, "--payload", "{nope"], capsys)
    assert status == 2 and "not JSON" in err, err
    status, _, err = cli(["decide", "c-9", "sg-1", "accept", *argv], capsys)
    assert status == 1 and "holds no conversation 'c-9'" in err, err
    assert not [e for e in stored(url) if isinstance(e.event, DecidedEvent)]  # nothing was decided


def test_the_policy_refuses_an_outsiders_dismissal_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A card the policy reserves for ``ops``: a dismissal by someone without the role is refused in one line,
    with a non-zero exit, and logged; a holder of the role ends it."""
    url = store_waiting(tmp_path / "ops.db", OpsNotes())
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([ACK]), encoding="utf-8")
    argv = ["--store", url, "--agent", f"script:{script}", "--domain", "tests.fakes:OpsNotes"]
    status, out, err = cli(["decide", "c-1", "sg-1", "dismiss", *argv, "--as", "eve"], capsys)
    assert (status, out) == (1, "") and err.count("\n") == 1 and "decided by one of: ops" in err, err
    assert [e.event.type for e in stored(url)][-4:] == ["resumed", "approval-refused", "handled", "finished"]
    status, out, err = cli(["decide", "c-1", "sg-1", "dismiss", *argv, "--as", "olga", "--role", "ops"], capsys)
    assert (status, err) == (0, "") and out.startswith("sg-1: Dismissed"), out
    (decided,) = [e.event for e in stored(url) if isinstance(e.event, DecidedEvent)]
    assert (decided.by, decided.roles, decided.via) == ("olga", ("ops",), "cli")
