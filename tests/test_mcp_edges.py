"""MCP servers at the edges, against the tests' own faulty server (the ``mcp`` SDK's, in a process of its own): a
tool whose schema cannot be used is refused alone, and a server that writes what is not JSON-RPC to its standard
output costs the person one line, never the SDK's traceback."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TextIO

import httpx
import pytest

from dial_runtime import Conversation, ScriptedAgent, policy_human
from dial_runtime.domains.payloads import MAX_DEPTH
from dial_runtime.mcp import McpConnectionError, McpDomain

from .fakes import envelope, suggest
from .test_mcp import DONE, FAULTY, anyio_backend, errlog
from .test_web_serve import serving_in_a_terminal
from .web_server import decode, run_input

__all__ = ["anyio_backend", "errlog"]  # the fixtures test_mcp defines, used here too

#: Depths (objects nested in objects) that pass what the SDK itself reads but not what a payload schema may hold.
TOO_DEEP = [MAX_DEPTH // 2, 90]
CLI = [sys.executable, "-m", "dial_runtime.cli"]


@pytest.mark.anyio
@pytest.mark.parametrize("depth", TOO_DEEP)
async def test_a_tool_whose_schema_nests_too_deep_is_refused_and_the_others_serve(
    depth: int, errlog: TextIO
) -> None:
    async with McpDomain.stdio([*FAULTY, "--nested-schema", str(depth)], errlog=errlog, deadline=20) as domain:
        assert "nested" not in domain.actions and "echo" in domain.actions
        (why,) = domain.refusals()
        assert why.startswith("tool 'nested' refused: the JSON Schema nests") and str(MAX_DEPTH) in why
        refused = domain.validate("nested", {})
        assert refused is not None and refused.code == "unknown-action" and "'nested' was refused" in refused.hint
        agent = ScriptedAgent([envelope(suggest("echo", json.dumps({"text": "hi"}))), DONE])
        conversation = Conversation(agent=agent, domain=domain, human=policy_human("accept"))
        result = await conversation.say("echo hi")
    assert [(outcome.action, outcome.status, outcome.result) for outcome in result.outcomes] == [
        ("echo", "done", {"result": "hi"})
    ]


def test_serve_says_in_one_line_which_tool_it_refused_and_serves_the_others(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("add", json.dumps({"a": 2, "b": 40}))), DONE]))
    server = shlex.join([*FAULTY, "--nested-schema", str(MAX_DEPTH)])
    options = ["--agent", f"script:{script}", "--mcp", server, "--store", f"sqlite:{tmp_path / 'c.db'}"]
    output = tmp_path / "serve.log"
    with serving_in_a_terminal(*options, output=output) as (url, _):
        said = decode(httpx.post(f"{url}/agui", json=run_input("t", words="add"), timeout=30).text)
        (interrupt,) = said[-1]["outcome"]["interrupts"]
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
        ran = decode(httpx.post(f"{url}/agui", json=run_input("t", resume=resume), timeout=30).text)
    (result,) = [event for event in ran if event["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"])["result"] == {"sum": 42}
    refusals = [line for line in output.read_text().splitlines() if "refused" in line]
    assert len(refusals) == 1 and refusals[0].startswith("dial-runtime serve: --mcp: tool 'nested' refused: ")


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_a_server_that_writes_garbage_and_exits_is_one_line(command: str, tmp_path: Path) -> None:
    server = shlex.join([*FAULTY, "--garbage", "then-exit"])
    store = ["--store", f"sqlite:{tmp_path / 'c.db'}"] if command == "serve" else []
    done = subprocess.run(
        [*CLI, command, "--agent", "ollama:m", "--mcp", server, *store],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == (2 if command == "serve" else 1)
    assert done.stderr.count("\n") == 1, done.stderr
    assert (
        done.stderr.startswith(f"dial-runtime {command}: --mcp: MCP server ") and "cannot connect" in done.stderr
    )


def test_garbage_before_the_protocol_goes_to_the_mcp_log_and_the_server_serves(tmp_path: Path) -> None:
    """A stray print before the server speaks MCP: the SDK's complaint (with its traceback) lands in --mcp-log,
    standard error holds none of it, and the tools serve."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("echo", json.dumps({"text": "hi"}))), DONE]))
    server = shlex.join([*FAULTY, "--garbage", "then-serve"])
    log = tmp_path / "mcp.log"
    options = ["--agent", f"script:{script}", "--mcp", server, "--mcp-log", str(log), "--trust-read-only"]
    output = tmp_path / "serve.log"
    with serving_in_a_terminal(*options, "--store", f"sqlite:{tmp_path / 'c.db'}", output=output) as (url, _):
        events = decode(httpx.post(f"{url}/agui", json=run_input("g", words="echo"), timeout=30).text)
    (result,) = [event for event in events if event["type"] == "TOOL_CALL_RESULT"]
    assert json.loads(result["content"])["status"] == "done"
    assert "Traceback" not in output.read_text() and "Failed to parse" not in output.read_text()
    assert "Failed to parse JSONRPC message from server" in log.read_text()


@pytest.mark.anyio
async def test_a_listing_too_deep_for_the_sdk_to_read_says_so_when_the_connection_gives_up(errlog: TextIO) -> None:
    """Past about 100 levels the SDK's JSON parser cannot read the server's answer at all (it drops the line), so
    no tool can be refused alone: connecting waits for an answer that never comes, and the error says why."""
    server = McpDomain.stdio([*FAULTY, "--nested-schema", "110"], errlog=errlog, connect_timeout=15)
    with pytest.raises(McpConnectionError, match=r"what it wrote last could not be read: .*recursion limit"):
        async with server:
            pass
