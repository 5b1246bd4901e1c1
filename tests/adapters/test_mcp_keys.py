"""Idempotency keys over MCP, against the tests' own keyed server (the ``mcp`` SDK's, in a process of its own,
keeping its calls, effects and answers in SQLite): a run's key travels in the request's ``_meta``, a server that
honours it has each key's effect once, and ``reconcile`` asks again only a tool named in ``keyed_tools``."""

from __future__ import annotations

import json
import shlex
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest

from dial_runtime import ActionError, Conversation, ScriptedAgent, policy_human
from dial_runtime.adapters.mcp import IDEMPOTENCY_KEY, McpDomain, mcp_domain
from dial_runtime.runtime.core import idempotency_key
from dial_runtime.runtime.events import ActionStartedEvent, OutcomeEvent
from dial_runtime.stores import MemoryStore

from ..driver.test_reconcile import died_running
from ..fakes import stop
from .test_mcp import FAULTY, anyio_backend, errlog, wait_for

__all__ = ["anyio_backend", "errlog"]  # the fixtures test_mcp defines, used here too

HERE = Path(__file__).parents[1]
KEYED = [sys.executable, str(HERE / "mcp_keyed_server.py")]
EMAIL = {"to": "ada@example.com", "subject": "The minutes"}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "keyed.db"


@pytest.fixture
async def domain(db: Path, errlog: TextIO) -> AsyncIterator[McpDomain]:
    """The keyed server, with its two keyed tools named as such (``log_note`` is not)."""
    async with McpDomain.stdio(
        [*KEYED, "--db", str(db)], errlog=errlog, deadline=20, keyed_tools={"send_email", "charge"}
    ) as domain:
        yield domain


def effects(db: Path) -> list[tuple[str, str | None, dict[str, Any]]]:
    """What the server did: each effect's tool, key and arguments, in order."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT tool, key, detail FROM effects ORDER BY seq").fetchall()
    return [(tool, key, json.loads(detail)) for tool, key, detail in rows]


def calls(db: Path) -> list[tuple[str, str | None, list[str], bool]]:
    """What reached the server's tools: each call's tool, key, ``_meta`` names and whether it was replayed."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT tool, key, meta_keys, replayed FROM calls ORDER BY seq").fetchall()
    return [(tool, key, json.loads(names), bool(replayed)) for tool, key, names, replayed in rows]


@pytest.mark.anyio
async def test_a_run_with_a_key_sends_it_in_the_requests_meta_and_has_one_effect(
    domain: McpDomain, db: Path
) -> None:
    result = await domain.run("send_email", EMAIL, key="c1:sg-1:1")
    assert result == {"message_id": 1, "to": "ada@example.com"}
    assert effects(db) == [("send_email", "c1:sg-1:1", EMAIL)]
    ((tool, key, names, replayed),) = calls(db)
    assert (tool, key, replayed) == ("send_email", "c1:sg-1:1", False)
    assert IDEMPOTENCY_KEY in names


@pytest.mark.anyio
async def test_the_same_key_twice_has_one_effect_and_the_same_result(domain: McpDomain, db: Path) -> None:
    first = await domain.run("send_email", EMAIL, key="c1:sg-1:1")
    again = await domain.run("send_email", EMAIL, key="c1:sg-1:1")
    other = await domain.run("send_email", EMAIL, key="c1:sg-2:1")
    assert first == again != other
    assert [key for _, key, _ in effects(db)] == ["c1:sg-1:1", "c1:sg-2:1"]
    assert [replayed for *_, replayed in calls(db)] == [False, True, False]


@pytest.mark.anyio
async def test_reconcile_after_a_run_gives_its_result_and_has_no_second_effect(
    domain: McpDomain, db: Path
) -> None:
    ran = await domain.run("send_email", EMAIL, key="c1:sg-1:1")
    for _ in range(3):  # reconcile may be asked more than once
        assert await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1") == ran
    assert effects(db) == [("send_email", "c1:sg-1:1", EMAIL)]
    assert [replayed for *_, replayed in calls(db)] == [False, True, True, True]


@pytest.mark.anyio
async def test_reconcile_of_a_run_that_never_reached_the_server_runs_it_once(db: Path, errlog: TextIO) -> None:
    """A process that died after logging the start and before the call reached the server: asking again under
    the key has the effect now, and only once however often recovery asks."""
    command = shlex.join([*KEYED, "--db", str(db)])
    async with mcp_domain(command, errlog=errlog, deadline=20, keyed_tools=["send_email"]) as domain:
        assert domain.is_keyed("send_email") and not domain.is_keyed("charge")
        first = await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1")
        assert first == {"message_id": 1, "to": "ada@example.com"}
        assert await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1") == first
    assert effects(db) == [("send_email", "c1:sg-1:1", EMAIL)]


@pytest.mark.anyio
async def test_reconcile_of_a_failed_keyed_call_fails_as_the_run_did(domain: McpDomain, db: Path) -> None:
    payload = {"account": "ada", "cents": 0}
    with pytest.raises(ActionError) as ran:
        await domain.run("charge", payload, key="c1:sg-1:1")
    with pytest.raises(ActionError) as reconciled:
        await domain.reconcile("charge", payload, key="c1:sg-1:1")
    assert ran.value.code == reconciled.value.code == "mcp-tool-error"
    assert str(ran.value) == str(reconciled.value) == "cannot charge 0 cents: the amount must be positive"
    assert effects(db) == []
    assert [(tool, replayed) for tool, _, _, replayed in calls(db)] == [("charge", False), ("charge", True)]
    assert await domain.reconcile("charge", {"account": "ada", "cents": 5}, key="c1:sg-2:1") == {
        "charge_id": 1,
        "cents": 5,
    }


@pytest.mark.anyio
async def test_reconcile_of_a_tool_not_keyed_cannot_tell_and_sends_nothing(
    domain: McpDomain, db: Path, errlog: TextIO
) -> None:
    await domain.run("log_note", {"text": "hello"}, key="c1:sg-1:1")
    with pytest.raises(LookupError, match=r"'log_note' is not in keyed_tools.*effect twice"):
        await domain.reconcile("log_note", {"text": "hello"}, key="c1:sg-1:1")
    assert [tool for tool, *_ in calls(db)] == ["log_note"], "nothing was sent"
    async with McpDomain.stdio([*KEYED, "--db", str(db)], errlog=errlog, deadline=20) as unkeyed:
        assert unkeyed.keyed_tools == frozenset()
        with pytest.raises(LookupError, match="'send_email' is not in keyed_tools"):
            await unkeyed.reconcile("send_email", EMAIL, key="c1:sg-2:1")
    assert [tool for tool, _, _ in effects(db)] == ["log_note"]


@pytest.mark.anyio
async def test_a_run_without_a_key_sends_none_and_is_not_deduplicated(domain: McpDomain, db: Path) -> None:
    first = await domain.run("send_email", EMAIL)  # as the runtime calls a domain that takes no key
    again = await domain.run("send_email", EMAIL, key=None)
    assert first != again
    assert [key for _, key, _ in effects(db)] == [None, None]
    for _, key, names, replayed in calls(db):
        assert key is None and not replayed
        assert IDEMPOTENCY_KEY not in names and not any(name.startswith("dev.dial-runtime/") for name in names)


@pytest.mark.anyio
async def test_reconcile_that_gets_no_answer_cannot_tell(domain: McpDomain, db: Path, errlog: TextIO) -> None:
    """Past the deadline, or with the session gone, the call may or may not have reached the server: recovery
    cannot tell (``LookupError``), where ``run`` fails the action; asked again, the key still has one effect."""
    domain.deadline = 0
    with pytest.raises(LookupError, match="'send_email' gave no answer for the key: the tool did not answer"):
        await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1")
    with pytest.raises(ActionError) as ran:
        await domain.run("send_email", EMAIL, key="c1:sg-1:1")
    assert ran.value.code == "mcp-timeout"
    domain.deadline = 20
    result = await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1")
    assert result == {"message_id": 1, "to": "ada@example.com"}
    # Whichever of the three calls reached the server first had the effect; any other that did was replayed.
    assert effects(db) == [("send_email", "c1:sg-1:1", EMAIL)]
    assert [replayed for *_, replayed in calls(db)].count(False) == 1

    async with McpDomain.stdio(FAULTY, errlog=errlog, deadline=20, keyed_tools=["die"]) as faulty:
        with pytest.raises(LookupError, match="gave no answer for the key: the MCP server went away"):
            await faulty.reconcile("die", {}, key="c1:sg-2:1")
        with pytest.raises(LookupError, match=r"gave no answer for the key: the MCP server('s session has| went)"):
            await faulty.reconcile("die", {}, key="c1:sg-2:1")  # the session ends, or has ended


@pytest.mark.anyio
async def test_reconcile_outside_the_block_cannot_tell(db: Path, errlog: TextIO) -> None:
    domain = McpDomain.stdio([*KEYED, "--db", str(db)], errlog=errlog, keyed_tools="all")
    async with domain:
        assert domain.is_keyed("log_note")
    with pytest.raises(LookupError, match="session has ended: the domain was closed"):
        await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1")
    with pytest.raises(ActionError) as ran:
        await domain.run("send_email", EMAIL, key="c1:sg-1:1")
    assert ran.value.code == "mcp-disconnected"
    assert calls(db) == []


@pytest.mark.anyio
async def test_reconcile_of_a_tool_the_server_does_not_list_cannot_tell(domain: McpDomain, db: Path) -> None:
    domain.keyed_tools = "all"
    with pytest.raises(LookupError, match="does not list the tool 'send_sms'"):
        await domain.reconcile("send_sms", {"to": "ada"}, key="c1:sg-1:1")
    assert calls(db) == []


def test_keyed_tools_is_all_or_tool_names() -> None:
    with pytest.raises(ValueError, match='keyed_tools is "all" or a collection of tool names'):
        McpDomain.stdio(KEYED, keyed_tools="send_email")
    assert McpDomain.stdio(KEYED, keyed_tools=("a", "b")).keyed_tools == frozenset({"a", "b"})
    assert McpDomain.http("http://127.0.0.1:1/mcp", keyed_tools="all").is_keyed("anything")
    assert not McpDomain.http("http://127.0.0.1:1/mcp").is_keyed("anything")


# --- streamable HTTP -------------------------------------------------------------------------------------------


@pytest.fixture
def http_server(db: Path, tmp_path: Path) -> Iterator[str]:
    """The keyed server over streamable HTTP on a free loopback port; its URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (tmp_path / "http-server.log").open("w") as log:
        process = subprocess.Popen([*KEYED, "--db", str(db), "--http", str(port)], stdout=log, stderr=log)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            with anyio.from_thread.start_blocking_portal() as portal:
                portal.call(wait_for, url)
            yield url
        finally:
            stop(process)


@pytest.mark.anyio
async def test_the_key_travels_over_streamable_http_too(http_server: str, db: Path) -> None:
    async with McpDomain.http(http_server, deadline=20, keyed_tools=["send_email"]) as domain:
        ran = await domain.run("send_email", EMAIL, key="c1:sg-1:1")
        assert await domain.reconcile("send_email", EMAIL, key="c1:sg-1:1") == ran
    assert effects(db) == [("send_email", "c1:sg-1:1", EMAIL)]


# --- through a conversation: the run's key reaches the server, and recovery reconciles with it ------------------

SEND = (
    '<dial><dial-suggest action="send_email">'
    f"<dial-payload>{json.dumps(EMAIL)}</dial-payload></dial-suggest></dial>"
)
ACK = "<dial><dial-acknowledge>ok</dial-acknowledge></dial>"


@pytest.mark.anyio
async def test_a_conversations_run_sends_the_key_its_log_records(domain: McpDomain, db: Path) -> None:
    conversation = await Conversation.open(
        MemoryStore(), "c-1", agent=ScriptedAgent([SEND, ACK]), domain=domain, human=policy_human()
    )
    await conversation.say("send the minutes")
    started = [e.event for e in conversation.log if isinstance(e.event, ActionStartedEvent)]
    assert (
        [key for _, key, _ in effects(db)]
        == [started[0].key]
        == [idempotency_key("c-1", conversation.log[0].time, "sg-1", 1)]
    )


@pytest.mark.anyio
@pytest.mark.parametrize("reached", [True, False], ids=["the run reached the server", "it never did"])
async def test_recovery_after_a_crash_mid_run_reports_done_with_one_effect(
    domain: McpDomain, db: Path, reached: bool
) -> None:
    store = MemoryStore()
    log = died_running(reply=SEND)
    await store.append("c-1", log, expected_seq=0)
    key = idempotency_key("c-1", log[0].time, "sg-1", 1)
    if reached:  # the process died after the server did it, before the outcome was written
        await domain.run("send_email", EMAIL, key=key)
    conversation = await Conversation.open(
        store, "c-1", agent=ScriptedAgent([]), domain=domain, human=policy_human()
    )
    (outcome,) = [e.event for e in conversation.log if isinstance(e.event, OutcomeEvent)]
    assert (outcome.status, outcome.reconciled, outcome.result) == (
        "done",
        True,
        {"message_id": 1, "to": "ada@example.com"},
    )
    assert [key_ for _, key_, _ in effects(db)] == [key]
