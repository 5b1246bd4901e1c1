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

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import Conversation, ScriptedAgent, policy_human
from dial_runtime.adapters.mcp import McpConnectionError, McpDomain, _json_at_any_depth
from dial_runtime.domains.payloads import MAX_DEPTH

from ..fakes import envelope, suggest
from ..web.test_web_serve import serving_in_a_terminal
from ..web_server import decode, run_input
from .test_mcp import DONE, FAULTY, anyio_backend, errlog, faulty_over_http

__all__ = ["anyio_backend", "errlog"]  # the fixtures test_mcp defines, used here too

#: Depths (objects nested in objects) that pass what the SDK itself reads but not what a payload schema may hold.
TOO_DEEP = [MAX_DEPTH // 2, 90]
#: Depths (each schema level is two JSON levels) past what the SDK's JSON parser reads (about 100), past what the
#: standard library's reads (about 490), and far past both: the answer listing the tool is read all the same.
TOO_DEEP_FOR_PARSERS = [110, 300, 2000, 100_000]
CLI = [sys.executable, "-m", "dial_runtime.cli"]


@pytest.mark.anyio
@pytest.mark.parametrize("depth", TOO_DEEP + TOO_DEEP_FOR_PARSERS)
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
async def test_a_listing_too_deep_for_the_sdk_that_is_not_json_either_says_so_when_the_connection_gives_up(
    errlog: TextIO,
) -> None:
    """A line too deep for the SDK's parser that is no JSON when read again (here a brace short): it stays
    unread, so connecting waits for an answer that never comes, and the one-line error says why."""
    command = [*FAULTY, "--nested-schema", "100000", "--cut-nested"]
    server = McpDomain.stdio(command, errlog=errlog, connect_timeout=10)
    with anyio.fail_after(30), pytest.raises(McpConnectionError) as raised:
        async with server:
            pass
    message = str(raised.value)
    assert "\n" not in message and "no answer within 10 s while connecting" in message
    assert "what it wrote last could not be read: Expecting ',' delimiter" in message


@pytest.mark.anyio
async def test_over_streamable_http_a_listing_too_deep_for_the_sdk_fails_connecting_at_once_in_one_line(
    tmp_path: Path,
) -> None:
    """Over streamable HTTP the SDK fails the ``tools/list`` request itself on an answer too deep for its parser,
    keeping nothing of the answer to read again: connecting fails at once, and the one-line error says why."""
    with (
        faulty_over_http(tmp_path, "--nested-schema", "110") as url,
        anyio.fail_after(30),
        pytest.raises(McpConnectionError) as raised,
    ):
        async with McpDomain.http(url, connect_timeout=15):
            pass
    message = str(raised.value)
    assert "\n" not in message and "cannot connect: MCPError: Failed to parse" in message
    assert "recursion limit exceeded" in message


#: JSON values of any shape: what the reader of deep lines must decode as the standard library does.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 2]), separators=st.sampled_from([None, (",", ":")]))
def test_a_line_read_at_any_depth_decodes_as_the_standard_library_reads_it(
    value: object, indent: int | None, separators: tuple[str, str] | None
) -> None:
    text = json.dumps(value, indent=indent, separators=separators)
    assert _json_at_any_depth(f" {text}\n") == json.loads(text)


@given(text=st.text(alphabet='{}[],:" \n0123456789.eE+-truefalsn\\', max_size=30))
def test_text_is_refused_at_any_depth_as_the_standard_library_refuses_it(text: str) -> None:
    """Text both readers take they read alike; what the standard library refuses, the reader of deep lines
    refuses with a ``ValueError`` too."""
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _json_at_any_depth(text)
    else:
        assert _json_at_any_depth(text) == expected


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", '{"a":[NaN]}'])
def test_the_constants_json_has_not_are_refused_at_any_depth(constant: str) -> None:
    with pytest.raises(ValueError, match="is not JSON"):
        _json_at_any_depth(constant)


def test_a_line_a_hundred_thousand_levels_deep_is_read_without_the_call_stack() -> None:
    depth = 100_000
    value = _json_at_any_depth('{"a":' * depth + "[]" + "}" * depth)
    for _ in range(depth):
        value = value["a"]
    assert value == []
