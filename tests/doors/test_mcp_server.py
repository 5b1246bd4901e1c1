"""``dial-runtime mcp`` driven by the ``mcp`` SDK's own client, over stdio and streamable HTTP, on the 2026-07-28
protocol and on the handshake versions before it; each decision taken by ``dial-runtime decide`` in another
process, as a person at a terminal would, and every effect counted where it lands (a file, an upstream server's
database, a git repository)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from dial_runtime.doors.gate import Gate, Waits
from dial_runtime.doors.mcp_server import OUTCOME_KEY
from dial_runtime.stores import open_store
from dial_runtime.views.person import Card, project

from ..adapters.test_mcp import GIT_SERVER
from .ledger import Ledger

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]
CLI = str(Path(sys.executable).parent / "dial-runtime")
KEYED = Path(__file__).parents[1] / "mcp_keyed_server.py"
LEDGER = "tests.doors.ledger:Ledger"
#: The protocol eras: the 2026-07-28 protocol (input_required rounds), and the handshake versions before it.
MODES = [pytest.param("auto", id="2026-07-28"), pytest.param("legacy", id="handshake")]


class Setup:
    """A store, a ledger file and the environment every process of one test shares."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = f"sqlite:{tmp_path / 'approvals.db'}"
        self.ledger = tmp_path / "ledger.txt"
        self.errors = tmp_path / "server-stderr.log"
        self.env = {**os.environ, "DIAL_TEST_LEDGER": str(self.ledger)}

    def lines(self) -> list[str]:
        return self.ledger.read_text(encoding="utf-8").splitlines() if self.ledger.exists() else []

    def serve(self, *options: str, domain: tuple[str, ...] = ("--domain", LEDGER)) -> list[str]:
        return ["mcp", *domain, "--store", self.store, *options]

    async def decide(self, conversation: str, suggestion: str, *decision: str, mcp: str | None = None) -> str:
        """``dial-runtime decide`` in another process (over the ledger, or the MCP server ``mcp``): its line."""
        command = [
            CLI,
            "decide",
            conversation,
            suggestion,
            *decision,
            "--store",
            self.store,
            "--agent",
            "outside:",
        ]
        command += ["--domain", LEDGER] if mcp is None else ["--mcp", mcp]
        with anyio.fail_after(60):
            done = await anyio.run_process([*command, "--as", "ann"], cwd=ROOT, env=self.env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode().strip()

    async def cards(self, conversation: str) -> list[Card]:
        store = open_store(self.store)
        try:
            return [item for item in project(await store.read(conversation)).items if isinstance(item, Card)]
        finally:
            await store.aclose()


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


@contextlib.asynccontextmanager
async def stdio(setup: Setup, mode: str, *options: str, **serving: Any) -> AsyncIterator[Client]:
    """A client of ``dial-runtime mcp`` over its standard input and output."""
    parameters = StdioServerParameters(command=CLI, args=setup.serve(*options, **serving), env=setup.env, cwd=ROOT)
    with setup.errors.open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog), mode=mode) as client:
            yield client


def where(result: Any) -> dict[str, Any]:
    """Where the call's proposal stands, as the result's ``_meta`` says."""
    assert result.meta is not None and OUTCOME_KEY in result.meta, result
    return result.meta[OUTCOME_KEY]  # type: ignore[no-any-return]


async def waiting(setup: Setup, within: float = 30) -> tuple[str, str]:
    """The conversation and the suggestion of the one card that waits in the store, once one does."""
    with anyio.fail_after(within):
        while True:
            store = open_store(setup.store)
            try:
                for conversation in await store.conversations():
                    card = project(await store.read(conversation)).items
                    found = [item for item in card if isinstance(item, Card) and item.waiting]
                    if found:
                        return conversation, found[0].id
            finally:
                await store.aclose()
            await anyio.sleep(0.05)


# --- the tools and the calls refused or run at once --------------------------------------------------------------


async def test_the_tools_are_the_domain_s_actions_with_their_marks(setup: Setup) -> None:
    async with stdio(setup, "auto") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"append-line", "read-lines", "strike-line", "sign-off"}
    assert tools["read-lines"].annotations is not None and tools["read-lines"].annotations.read_only_hint
    strike = tools["strike-line"].annotations
    assert strike is not None and (strike.read_only_hint, strike.destructive_hint) == (False, True)
    assert tools["append-line"].input_schema["required"] == ["text"]
    assert tools["append-line"].description == "Append a line to the ledger."


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "arguments", "code", "field"),
    [
        pytest.param("nope", {}, "unknown-action", None, id="unknown-tool"),
        pytest.param("append-line", {"text": ""}, "invalid-payload", "text", id="invalid"),
        pytest.param("strike-line", {"text": "absent"}, "not-found", "text", id="domain-check"),
    ],
)
async def test_a_call_the_domain_refuses_is_a_tool_error_at_once(
    setup: Setup, mode: str, tool: str, arguments: dict[str, Any], code: str, field: str | None
) -> None:
    async with stdio(setup, mode) as client:
        with anyio.fail_after(30):
            result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert result.structured_content is not None
    assert (result.structured_content["code"], result.structured_content["field"]) == (code, field)
    assert result.structured_content["hint"] in result.content[0].text  # type: ignore[union-attr]
    store = open_store(setup.store)
    try:
        assert await store.conversations() == [], "nothing recorded"
    finally:
        await store.aclose()


async def test_a_read_only_tool_runs_at_once(setup: Setup) -> None:
    setup.ledger.write_text("one\n", encoding="utf-8")
    async with stdio(setup, "auto") as client:
        with anyio.fail_after(30):
            result = await client.call_tool("read-lines", {})
    assert not result.is_error
    assert result.structured_content == {"lines": ["one"]}
    assert where(result)["status"] == "done"


# --- a write waits for a person, who decides in another process --------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("decision", "error", "text", "lines"),
    [
        pytest.param(("accept",), False, '{"lines": 1}', ["milk"], id="accepted"),
        pytest.param(("edit", "--payload", '{"text": "oat milk"}'), False, "oat milk", ["oat milk"], id="edited"),
        pytest.param(("dismiss",), True, "dismissed the call: it was not run", [], id="dismissed"),
    ],
)
async def test_a_write_waits_for_a_decision_taken_in_another_process(
    setup: Setup, mode: str, decision: tuple[str, ...], error: bool, text: str, lines: list[str]
) -> None:
    async with stdio(setup, mode, "--round", "1", "--wait", "60") as client, anyio.create_task_group() as group:
        results: list[Any] = []

        async def call() -> None:
            results.append(await client.call_tool("append-line", {"text": "milk"}))

        group.start_soon(call)
        conversation, suggestion = await waiting(setup)
        assert setup.lines() == [], "nothing runs before the decision"
        told = await setup.decide(conversation, suggestion, *decision)
        assert told.startswith(suggestion)
        with anyio.fail_after(30):
            while not results:
                await anyio.sleep(0.05)
    (result,) = results
    assert result.is_error is error
    assert text in " ".join(block.text for block in result.content)
    assert where(result)["conversation"] == conversation
    assert setup.lines() == lines
    if decision[0] == "edit":
        assert where(result)["ran_with"] == {"text": "oat milk"}


async def test_a_call_that_outwaits_its_time_says_it_still_waits_and_the_same_call_finds_the_outcome(
    setup: Setup,
) -> None:
    async with stdio(setup, "legacy", "--wait", "1") as client:
        with anyio.fail_after(30):
            first = await client.call_tool("append-line", {"text": "milk"})
        assert first.is_error, "never a false success"
        assert "Still waiting" in first.content[0].text  # type: ignore[union-attr]
        assert where(first)["status"] == "waiting"
        conversation, suggestion = where(first)["conversation"], where(first)["suggestion"]
        with anyio.fail_after(30):
            second = await client.call_tool("append-line", {"text": "milk"})
        assert where(second)["suggestion"] == suggestion, "the same call waits on the same card"
        await setup.decide(conversation, suggestion, "accept")
        with anyio.fail_after(30):
            found = await client.call_tool("append-line", {"text": "milk"})
    assert not found.is_error and where(found)["suggestion"] == suggestion
    assert setup.lines() == ["milk"]
    assert [card.status for card in await setup.cards(conversation)] == ["done"]


async def test_a_call_with_an_idempotency_key_is_named_by_it(setup: Setup) -> None:
    key = {"dev.dial-runtime/idempotency-key": "order-7"}
    async with stdio(setup, "legacy", "--wait", "0.5") as client:
        with anyio.fail_after(30):
            first = await client.call_tool("append-line", {"text": "milk"}, meta=key)
        conversation, suggestion = where(first)["conversation"], where(first)["suggestion"]
        assert conversation == "mcp:@key:order-7"
        await setup.decide(conversation, suggestion, "accept")
        with anyio.fail_after(30):
            found = [await client.call_tool("append-line", {"text": "milk"}, meta=key) for _ in range(2)]
            reused = await client.call_tool("append-line", {"text": "eggs"}, meta=key)
            bad = await client.call_tool("append-line", {"text": "eggs"}, meta={**key, **{next(iter(key)): "a b"}})
    assert [where(result)["suggestion"] for result in found] == [suggestion, suggestion]
    assert reused.is_error and reused.structured_content["code"] == "key-reused"  # type: ignore[index]
    assert bad.is_error and bad.structured_content["code"] == "invalid-key"  # type: ignore[index]
    assert setup.lines() == ["milk"]


async def test_a_waiting_call_reports_progress_to_a_client_that_asks(setup: Setup) -> None:
    progress: list[tuple[float, str | None]] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with stdio(setup, "legacy", "--wait", "2", "--progress", "0.5") as client:
        with anyio.fail_after(30):
            result = await client.call_tool("append-line", {"text": "milk"}, progress_callback=heard)
    assert result.is_error and where(result)["status"] == "waiting"
    assert len(progress) >= 2
    assert all("Append the line 'milk'" in (message or "") for _, message in progress)


async def test_on_2026_07_28_a_call_answers_input_required_with_a_sealed_state(setup: Setup) -> None:
    async with stdio(setup, "auto", "--round", "0.5") as client:
        with anyio.fail_after(30):
            first = await client.session.call_tool("append-line", {"text": "milk"}, allow_input_required=True)
        assert first.result_type == "input_required" and first.request_state
        with pytest.raises(json.JSONDecodeError):
            json.loads(first.request_state)  # sealed: the client cannot read or forge it
        with anyio.fail_after(30), pytest.raises(MCPError, match="requestState"):
            await client.session.call_tool(
                "append-line", {"text": "milk"}, request_state=first.request_state[:-4] + "AAAA"
            )
        conversation, suggestion = await waiting(setup)
        await setup.decide(conversation, suggestion, "accept")
        with anyio.fail_after(30):
            ended = await client.session.call_tool(
                "append-line", {"text": "milk"}, request_state=first.request_state, allow_input_required=True
            )
            # The state names its card: asked with it again, the same outcome, never a new proposal.
            again = await client.session.call_tool(
                "append-line", {"text": "milk"}, request_state=first.request_state, allow_input_required=True
            )
    assert ended.result_type == again.result_type == "complete" and not ended.is_error
    assert where(ended)["suggestion"] == where(again)["suggestion"] == suggestion
    assert [card.status for card in await setup.cards(conversation)] == ["done"]
    assert setup.lines() == ["milk"]


async def test_a_client_that_leaves_while_a_card_waits_loses_nothing(setup: Setup) -> None:
    async with stdio(setup, "legacy") as client:
        with anyio.move_on_after(1.5):
            await client.call_tool("append-line", {"text": "milk"})
    conversation, suggestion = await waiting(setup)
    assert [card.status for card in await setup.cards(conversation)] == ["deferred-waiting"]
    await setup.decide(conversation, suggestion, "accept")
    async with stdio(setup, "legacy") as client:
        with anyio.fail_after(30):
            found = await client.call_tool("append-line", {"text": "milk"})
    assert not found.is_error and where(found)["suggestion"] == suggestion
    assert setup.lines() == ["milk"]


# --- streamable HTTP, and a server killed while a card waits ---------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def http_server(setup: Setup, port: int, *options: str) -> AsyncIterator[anyio.abc.Process]:
    """``dial-runtime mcp --http`` in a process of its own, once it answers."""
    command = [CLI, *setup.serve("--http", f"127.0.0.1:{port}", *options)]
    with setup.errors.open("a", encoding="utf-8") as errlog:
        process = await anyio.open_process(command, cwd=ROOT, env=setup.env, stderr=errlog)
        try:
            with anyio.fail_after(60):
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        async with httpx.AsyncClient() as probe:
                            await probe.get(f"http://127.0.0.1:{port}/mcp")
                            break
                    assert process.returncode is None, setup.errors.read_text()
                    await anyio.sleep(0.1)
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            with anyio.fail_after(20):
                await process.wait()


@pytest.mark.parametrize("mode", MODES)
async def test_over_http_a_server_killed_while_a_card_waits_loses_nothing_and_runs_nothing_twice(
    setup: Setup, mode: str
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    found_waiting: list[tuple[str, str]] = []
    async with http_server(setup, port, "--round", "1") as server:
        with contextlib.suppress(Exception):  # the client's connection fails as the server dies under it
            async with (
                Client(streamable_http_client(url), mode=mode) as client,
                anyio.create_task_group() as group,
            ):
                group.start_soon(client.call_tool, "append-line", {"text": "milk"})
                found_waiting.append(await waiting(setup))
                server.send_signal(signal.SIGKILL)
                with anyio.fail_after(20):
                    await server.wait()
                group.cancel_scope.cancel()
    ((conversation, suggestion),) = found_waiting
    await setup.decide(conversation, suggestion, "accept")  # while no server runs
    assert setup.lines() == ["milk"]
    async with http_server(setup, port), Client(streamable_http_client(url), mode=mode) as client:
        with anyio.fail_after(30):
            found = await client.call_tool("append-line", {"text": "milk"})
    assert not found.is_error and where(found)["suggestion"] == suggestion
    assert setup.lines() == ["milk"], "the retry found the outcome: nothing ran twice"
    assert [card.status for card in await setup.cards(conversation)] == ["done"]


# --- an upstream MCP server's tools, proxied --------------------------------------------------------------------


async def test_an_upstream_write_waits_and_its_run_carries_the_idempotency_key(
    setup: Setup, tmp_path: Path
) -> None:
    database = tmp_path / "keyed.db"
    upstream = shlex.join([sys.executable, str(KEYED), "--db", str(database)])
    domain = ("--upstream", upstream)
    async with stdio(setup, "auto", "--round", "1", domain=domain) as client, anyio.create_task_group() as group:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"send_email", "charge", "log_note"} <= tools
        results: list[Any] = []

        async def call() -> None:
            results.append(await client.call_tool("send_email", {"to": "ada@example.com", "subject": "hi"}))

        group.start_soon(call)
        conversation, suggestion = await waiting(setup)
        await setup.decide(conversation, suggestion, "accept", mcp=upstream)
        with anyio.fail_after(30):
            while not results:
                await anyio.sleep(0.05)
    assert not results[0].is_error, results[0]
    with sqlite3.connect(database) as db:
        effects = db.execute("SELECT tool, key FROM effects").fetchall()
    assert len(effects) == 1 and effects[0][0] == "send_email"
    (card,) = await setup.cards(conversation)
    assert effects[0][1] == card.run_key, "the run's idempotency key reached the upstream call's _meta"


def commits(repository: Path) -> list[str]:
    shown = subprocess.run(
        ["git", "log", "--format=%s"], cwd=repository, capture_output=True, text=True, timeout=30
    )
    return shown.stdout.split("\n")[:-1] if shown.returncode == 0 else []


async def test_mcp_server_git_reads_at_once_and_commits_once_a_person_approves(
    setup: Setup, repository: Path
) -> None:
    upstream = shlex.join([str(GIT_SERVER), "--repository", str(repository)])
    async with stdio(setup, "legacy", domain=("--upstream", upstream)) as client:
        with anyio.fail_after(60):
            status = await client.call_tool("git_status", {"repo_path": str(repository)})
        assert not status.is_error and "notes.txt" in status.content[0].text  # type: ignore[union-attr]
        async with anyio.create_task_group() as group:
            results: list[Any] = []

            async def call() -> None:
                arguments = {"repo_path": str(repository), "message": "Add notes"}
                results.append(await client.call_tool("git_commit", arguments))

            group.start_soon(call)
            conversation, suggestion = await waiting(setup)
            assert commits(repository) == []
            await setup.decide(conversation, suggestion, "accept", mcp=upstream)
            with anyio.fail_after(60):
                while not results:
                    await anyio.sleep(0.05)
    assert not results[0].is_error, results[0]
    assert commits(repository) == ["Add notes"]


# --- the command line refuses what it cannot serve -------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        pytest.param(["--domain", "no_such_module:Factory"], "no_such_module", id="domain"),
        pytest.param(["--domain", LEDGER, "--http", "here"], "--http takes [HOST:]PORT", id="http"),
        pytest.param(["--domain", LEDGER, "--http", "0.0.0.0:8765"], "loopback address", id="http-exposed"),
        pytest.param(["--domain", LEDGER, "--ask", "nope"], "--ask names no tool", id="ask"),
        pytest.param(["--domain", LEDGER, "--wait", "0"], "--wait is a positive number", id="wait"),
        pytest.param(["--domain", LEDGER, "--prefix", "a b"], "prefix", id="prefix"),
        pytest.param(["--upstream", "no-such-command-here"], "cannot connect", id="upstream"),
        pytest.param(["--domain", LEDGER, "--human", "no_such_module:person"], "--human", id="human"),
        pytest.param(
            ["--domain", LEDGER, "--human", "tests.doors.ledger:Ledger"],
            "returned Ledger, not a person",
            id="human-kind",
        ),
        pytest.param(
            ["--domain", LEDGER, "--announce", "tests.doors.ledger:Ledger"], "not an Announcer", id="announce"
        ),
    ],
)
def test_a_command_line_that_cannot_serve_is_refused_in_one_line(
    setup: Setup, options: list[str], says: str
) -> None:
    refused_in_one_line(setup, ["mcp", *options, "--store", setup.store], says)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        pytest.param(["--agent", "outside:"], "", id="no-such-store"),
        pytest.param(["--agent", "outside:someone"], "outside: takes nothing after the colon", id="agent"),
        pytest.param(["--agent", "outside:", "--mcp", "no-such-command-here"], "cannot connect", id="upstream"),
    ],
)
def test_decide_refuses_in_one_line_what_it_cannot_do(setup: Setup, options: list[str], says: str) -> None:
    async def a_card_waits() -> str:
        store = open_store(setup.store)
        try:
            waits = await Gate(Ledger(setup.ledger), store, prefix="mcp").propose(
                "append-line", {"text": "a"}, by="t"
            )
            assert isinstance(waits, Waits)
            return waits.conversation_id
        finally:
            await store.aclose()

    conversation = anyio.run(a_card_waits) if says else "mcp:nothing"
    domain = [] if "--mcp" in options else ["--domain", LEDGER]
    refused_in_one_line(
        setup, ["decide", conversation, "sg-1", "accept", "--store", setup.store, *options, *domain], says
    )


def refused_in_one_line(setup: Setup, arguments: list[str], says: str) -> None:
    """The command fails with one line on standard error that says ``says``, and no traceback."""
    done = subprocess.run(
        [CLI, *arguments],
        cwd=ROOT,
        env=setup.env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr
