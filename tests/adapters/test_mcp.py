"""MCP servers as domains, against real servers: mcp-server-git (PyPI), @modelcontextprotocol/server-filesystem
(npm, installed into tests/mcp_node by ``npm ci``) and the tests' own faulty server, each through a real
Conversation so that every proposal is seen to get exactly one outcome."""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx
import pytest

from dial_runtime import Conversation, Outcome, ScriptedAgent, policy_human, scripted_human, system_prompt
from dial_runtime.adapters.mcp import McpConnectionError, McpDomain

from ..fakes import envelope, stop, suggest

HERE = Path(__file__).parents[1]
FAULTY = [sys.executable, str(HERE / "mcp_faulty_server.py")]
GIT_SERVER = Path(sys.executable).parent / "mcp-server-git"
FILESYSTEM_SERVER = HERE / "mcp_node" / "node_modules" / ".bin" / "mcp-server-filesystem"
DONE = "<dial><dial-inform>ok</dial-inform></dial>"


@pytest.fixture(params=[pytest.param(("trio", {}), id="trio"), pytest.param(("asyncio", {}), id="asyncio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Real servers on both backends, in real time (a virtual clock would jump past their answers)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where the servers' standard error goes, so a test's output holds only its own."""
    with (tmp_path / "server-stderr.log").open("w", encoding="utf-8") as file:
        yield file


def payload(value: Any) -> str:
    return json.dumps(value)


async def hold(domain: McpDomain, reply: str, human: Any) -> tuple[Conversation, tuple[Outcome, ...]]:
    """One ``say`` whose agent sends ``reply`` (then "ok"); every suggestion in it must get one outcome."""
    conversation = Conversation(agent=ScriptedAgent([reply, DONE, DONE]), domain=domain, human=human)
    with anyio.fail_after(60):
        result = await conversation.say("go")
    proposed = [e.event.id for e in conversation.log if e.event.type == "proposed"]
    assert sorted(o.id for o in result.outcomes) == sorted(proposed), "exactly one outcome per proposal"
    return conversation, result.outcomes


# --- mcp-server-git ---------------------------------------------------------------------------------------------


def git_server(repository: Path, errlog: TextIO, **options: Any) -> McpDomain:
    assert GIT_SERVER.exists(), "mcp-server-git is missing: pip install -e '.[test]' installs it"
    return McpDomain.stdio([str(GIT_SERVER), "--repository", str(repository)], errlog=errlog, **options)


@pytest.mark.anyio
async def test_git_read_only_tools_run_at_once_only_when_trusted(repository: Path, errlog: TextIO) -> None:
    reply = envelope(suggest("git_status", payload({"repo_path": str(repository)})))
    async with git_server(repository, errlog) as untrusted:
        assert untrusted.actions["git_status"].mutates, "by default every tool waits for the person"
        _, outcomes = await hold(untrusted, reply, scripted_human(["dismiss"]))
        assert [o.status for o in outcomes] == ["dismissed"]
    async with git_server(repository, errlog, trust_read_only=True) as trusted:
        assert not trusted.actions["git_status"].mutates and not trusted.actions["git_status"].destructive
        _, outcomes = await hold(trusted, reply, scripted_human([]))
        ((outcome,),) = [outcomes]
        assert outcome.status == "done" and "new file:   notes.txt" in outcome.result
        assert outcome.preview.startswith('Git status: repo_path="/')


@pytest.mark.anyio
async def test_git_annotations_set_the_marks(repository: Path, errlog: TextIO) -> None:
    """destructiveHint marks an action destructive and idempotentHint repeatable, as mcp-server-git sets them."""
    async with git_server(repository, errlog) as domain:
        marks = {
            name: (spec.mutates, spec.destructive, spec.repeatable)
            for name, spec in domain.actions.items()
            if name in ("git_commit", "git_add", "git_reset")
        }
    assert marks == {
        "git_commit": (True, False, False),
        "git_add": (True, False, True),
        "git_reset": (True, True, True),
    }


@pytest.mark.anyio
async def test_git_commit_and_reset_change_the_repository_when_accepted(repository: Path, errlog: TextIO) -> None:
    repo_path = str(repository)
    async with git_server(repository, errlog, trust_read_only=True) as domain:
        assert domain.actions["git_reset"].destructive and not domain.actions["git_commit"].destructive
        commit = envelope(
            suggest("git_commit", payload({"repo_path": repo_path, "message": "Add the notes"})),
            suggest("git_log", payload({"repo_path": repo_path, "max_count": 1})),
        )
        _, outcomes = await hold(domain, commit, policy_human("accept"))
        assert [o.status for o in outcomes] == ["done", "done"]
        assert "Add the notes" in json.dumps(outcomes[1].result)
        log = subprocess.run(["git", "log", "--format=%s"], cwd=repository, capture_output=True, text=True)
        assert log.stdout.strip() == "Add the notes"

        (repository / "more.txt").write_text("call the dentist\n", encoding="utf-8")
        subprocess.run(["git", "add", "more.txt"], cwd=repository, check=True, timeout=30)
        reset = envelope(suggest("git_reset", payload({"repo_path": repo_path})))
        conversation, outcomes = await hold(domain, reset, policy_human("accept"))
        shown = [e.event for e in conversation.log if e.event.type == "suggestion"]
        assert [(s.destructive, s.mutates) for s in shown] == [(True, True)]
        assert [o.status for o in outcomes] == ["done"]
        status = subprocess.run(["git", "status", "--porcelain"], cwd=repository, capture_output=True, text=True)
        assert status.stdout.strip() == "?? more.txt"


@pytest.mark.anyio
async def test_git_payloads_are_checked_against_the_tools_schema(repository: Path, errlog: TextIO) -> None:
    async with git_server(repository, errlog) as domain:
        reply = envelope(
            suggest("git_commit", payload({"repo_path": str(repository)})),
            suggest("git_log", payload({"repo_path": str(repository), "max_count": "ten"})),
            suggest("git_push", payload({})),
        )
        _, outcomes = await hold(domain, reply, policy_human("accept"))
        found = [(o.status, o.code, o.field, o.hint) for o in outcomes]
        assert found[:2] == [
            ("invalid", "invalid-payload", "message", "Give `message`: it is required."),
            ("invalid", "invalid-payload", "max_count", "Expected `integer`, got `string`."),
        ]
        assert found[2][:2] == ("invalid", "unknown-action")
        prompt = system_prompt(domain)
        assert "## `git_commit`" in prompt and '"message"' in prompt
        examples = {name: entry["example"] for name, entry in domain.vocabulary.items()}
        assert examples["git_commit"] is not None
        for name, example in examples.items():
            assert example is None or domain.validate(name, example) is None, name


# --- @modelcontextprotocol/server-filesystem ---------------------------------------------------------------------


def filesystem_server(folder: Path, errlog: TextIO, **options: Any) -> McpDomain:
    if shutil.which("node") is None:
        pytest.fail("node is missing: apt-get install nodejs npm (then npm ci --prefix tests/mcp_node)")
    if not FILESYSTEM_SERVER.exists():
        pytest.fail("@modelcontextprotocol/server-filesystem is missing: npm ci --prefix tests/mcp_node")
    return McpDomain.stdio([str(FILESYSTEM_SERVER), str(folder)], errlog=errlog, **options)


@pytest.mark.anyio
async def test_the_filesystem_server_writes_reads_and_refuses_what_is_outside(
    tmp_path: Path, errlog: TextIO
) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    target = folder.resolve() / "note.txt"
    async with filesystem_server(folder.resolve(), errlog, trust_read_only=True) as domain:
        assert domain.actions["write_file"].destructive and domain.actions["write_file"].mutates
        assert not domain.actions["list_directory"].mutates
        reply = envelope(
            suggest("write_file", payload({"path": str(target), "content": "buy milk"})),
            suggest("list_directory", payload({"path": str(folder.resolve())})),
            suggest("list_directory", payload({"path": "/etc"})),
            suggest("write_file", payload({"content": "no path"})),
        )
        _, outcomes = await hold(domain, reply, policy_human("accept"))
        assert [(o.status, o.code, o.field) for o in outcomes] == [
            ("done", None, None),
            ("done", None, None),
            ("failed", "mcp-tool-error", None),
            ("invalid", "invalid-payload", "path"),
        ]
        assert target.read_text(encoding="utf-8") == "buy milk"
        assert "note.txt" in json.dumps(outcomes[1].result)
        assert "outside allowed directories" in (outcomes[2].error or "")
        assert outcomes[0].preview.startswith('Write File: path="/')


# --- the faulty server: errors, hangs, deaths --------------------------------------------------------------------


@pytest.fixture
async def faulty(errlog: TextIO) -> AsyncIterator[McpDomain]:
    async with McpDomain.stdio(FAULTY, errlog=errlog, deadline=20) as domain:
        yield domain


@pytest.mark.anyio
async def test_results_and_errors_of_a_tool_become_outcomes(faulty: McpDomain) -> None:
    reply = envelope(
        suggest("add", payload({"a": 2, "b": 3})),
        suggest("echo", payload({"text": "hello"})),
        suggest("boom", payload({})),
        suggest("echo", payload({"text": "x" * 21})),
    )
    _, outcomes = await hold(faulty, reply, policy_human("accept"))
    assert [(o.status, o.result, o.code) for o in outcomes] == [
        ("done", {"sum": 5}, None),
        ("done", {"result": "hello"}, None),
        ("failed", None, "mcp-tool-error"),
        ("invalid", None, "invalid-payload"),
    ]
    assert "boom" in (outcomes[2].error or "")
    assert outcomes[3].hint == 'Expected `string` of length <= 20, got "xxxxxxxxxxxxxxxxxxxxx".'
    assert outcomes[1].preview == 'Echo: text="hello"'


@pytest.mark.anyio
async def test_a_tool_that_hangs_fails_at_the_deadline_and_the_session_goes_on(faulty: McpDomain) -> None:
    faulty.deadline = 0.3
    _, outcomes = await hold(faulty, envelope(suggest("hang", payload({}))), policy_human("accept"))
    ((outcome,),) = [outcomes]
    assert (outcome.status, outcome.code) == ("failed", "mcp-timeout")
    assert outcome.hint and "may or may not" in outcome.hint
    faulty.deadline = 20
    assert await faulty.run("echo", {"text": "still here"}) == {"result": "still here"}


@pytest.mark.anyio
async def test_a_server_that_dies_mid_call_fails_that_action_and_every_later_one(faulty: McpDomain) -> None:
    reply = envelope(suggest("die", payload({})), suggest("echo", payload({"text": "anyone?"})))
    _, outcomes = await hold(faulty, reply, policy_human("accept"))
    assert [(o.status, o.code) for o in outcomes] == [
        ("failed", "mcp-disconnected"),
        ("failed", "mcp-disconnected"),
    ]


@pytest.mark.anyio
async def test_a_server_that_cannot_start_is_a_clear_error(errlog: TextIO, tmp_path: Path) -> None:
    with pytest.raises(McpConnectionError, match="cannot connect: FileNotFoundError"):
        async with McpDomain.stdio([str(tmp_path / "no-such-server")], errlog=errlog):
            pass
    with pytest.raises(ValueError, match="empty"):
        McpDomain.stdio([])


@pytest.mark.anyio
async def test_a_domain_used_outside_its_block_fails_its_actions(errlog: TextIO) -> None:
    domain = McpDomain.stdio(FAULTY, errlog=errlog)
    async with domain:
        assert "echo" in domain.actions
    _, outcomes = await hold(domain, envelope(suggest("add", payload({"a": 1, "b": 1}))), policy_human("accept"))
    assert [(o.status, o.code) for o in outcomes] == [("failed", "mcp-disconnected")]


# --- streamable HTTP -------------------------------------------------------------------------------------------


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The faulty server over streamable HTTP on a free loopback port; its URL once it answers."""
    with faulty_over_http(tmp_path) as url:
        yield url


@contextlib.contextmanager
def faulty_over_http(tmp_path: Path, *options: str) -> Iterator[str]:
    """The faulty server with ``options`` over streamable HTTP on a free loopback port; its URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (tmp_path / "http-server.log").open("w") as log:
        process = subprocess.Popen([*FAULTY, "--http", str(port), *options], stdout=log, stderr=log)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            with anyio.from_thread.start_blocking_portal() as portal:
                portal.call(wait_for, url)
            yield url
        finally:
            stop(process)


async def wait_for(url: str) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                async with httpx.AsyncClient() as client:
                    await client.get(url, timeout=1)
                return
            except httpx.TransportError:
                await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_a_server_over_streamable_http_is_a_domain_too(http_server: str) -> None:
    async with McpDomain.http(http_server, deadline=20) as domain:
        reply = envelope(suggest("add", payload({"a": 20, "b": 22})), suggest("boom", payload({})))
        _, outcomes = await hold(domain, reply, policy_human("accept"))
        assert [(o.status, o.result, o.code) for o in outcomes] == [
            ("done", {"sum": 42}, None),
            ("failed", None, "mcp-tool-error"),
        ]
    with pytest.raises(ValueError, match="not an http"):
        McpDomain.http("ftp://example.com")


# --- dial-runtime chat --mcp ------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_chat_holds_a_conversation_over_an_mcp_servers_tools(tmp_path: Path) -> None:
    from ..openai_server import OpenAIServer
    from ..terminal.test_terminal import Terminal, dial, told

    with OpenAIServer() as server:
        server.add(
            dial(
                '<dial-suggest action="add">Add them<dial-payload>{"a": 2, "b": 40}</dial-payload></dial-suggest>'
            ),
            dial("<dial-inform>It is 42.</dial-inform>"),
        )
        log = tmp_path / "server.log"
        command = " ".join(FAULTY)
        term = Terminal("chat", "--agent", f"{server.base_url}#m", "--mcp", command, "--mcp-log", str(log))
        try:
            term.type("add 2 and 40", after="you:")
            term.expect("sg-1 · add", "Add: a=2, b=40")
            term.type("a", after="sg-1 ›")
            term.expect('✓ done: Add: a=2, b=40 ({"sum": 42})', "agent: It is 42.")
            term.press("\x04", after="you:")
            assert term.finish() == 0
        finally:
            if term.child.isalive():
                term.child.terminate(force=True)
        system = str(server.requests[0].messages[0]["content"])
        assert "## `add`" in system and "Add two numbers" in system
        assert 'yield="sg-1:done"' in told(server.requests[1])


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize("trusted", [False, True], ids=["asks", "trust-read-only"])
def test_chat_runs_a_read_only_tool_unasked_only_with_trust_read_only(tmp_path: Path, trusted: bool) -> None:
    """The faulty server's ``echo`` is marked read-only: ``chat`` puts it to the person unless
    ``--trust-read-only`` is given, then runs it at once."""
    from ..terminal.test_terminal import Terminal

    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("echo", payload({"text": "hi"}))), DONE]))
    flags = ["--trust-read-only"] if trusted else []
    term = Terminal("chat", "--agent", f"script:{script}", "--mcp", shlex.join(FAULTY), *flags)
    try:
        term.child.expect_exact("you:", timeout=60)  # starting the server and listing its tools, on a busy machine
        term.child.send("echo hi\r")
        if not trusted:
            term.expect("sg-1 · echo")
            term.type("a", after="sg-1 ›")
        term.expect('✓ done: Echo: text="hi"', "agent: ok")
        term.press("\x04", after="you:")
        assert term.finish() == 0
    finally:
        if term.child.isalive():
            term.child.terminate(force=True)
    assert ("sg-1 ›" in term.screen) is not trusted


@pytest.mark.parametrize(
    ("server", "status", "message"),
    [
        (
            "/no/such/server --flag",
            1,
            "--mcp: MCP server /no/such/server --flag: cannot connect: FileNotFoundError",
        ),
        ("'unclosed", 2, "--mcp: cannot read the command"),
    ],
)
def test_chat_refuses_an_mcp_server_it_cannot_reach(
    server: str, status: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from dial_runtime.cli import main

    assert main(["chat", "--agent", "ollama:m", "--mcp", server]) == status
    assert message in capsys.readouterr().err


# --- dial-runtime serve --mcp -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted", "workers"), [(False, 1), (True, 2)], ids=["asks", "trust-read-only-2-workers"]
)
def test_serve_puts_an_mcp_servers_tools_behind_agui(
    repository: Path, tmp_path: Path, trusted: bool, workers: int
) -> None:
    """A real git server behind ``serve``: its read-only ``git_status`` waits for the person's approval, unless
    ``--trust-read-only`` lets it run at once; either way its output is the tool call's result. With several
    workers, each connects to a server of its own."""
    from ..web.test_web_serve import serve
    from ..web_server import decode, run_input

    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("git_status", payload({"repo_path": str(repository)}))), DONE]))
    server = shlex.join([str(GIT_SERVER), "--repository", str(repository)])
    options = ["--agent", f"script:{script}", "--mcp", server, "--store", f"sqlite:{tmp_path / 'c.db'}"]
    options += ["--workers", str(workers), *(["--trust-read-only"] if trusted else [])]
    with serve(*options) as url:
        events = decode(httpx.post(f"{url}/agui", json=run_input("g", words="status?"), timeout=30).text)
        interrupts = events[-1]["outcome"].get("interrupts", [])
        if not trusted:
            assert [e for e in events if e["type"] == "TOOL_CALL_RESULT"] == []
            (interrupt,) = interrupts
            resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
            events = decode(httpx.post(f"{url}/agui", json=run_input("g", resume=resume), timeout=30).text)
        else:
            assert interrupts == []
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == "sg-1"
    assert json.loads(result["content"])["status"] == "done" and "notes.txt" in result["content"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--mcp", "/no/such/server"], "dial-runtime serve: --mcp: MCP server /no/such/server: cannot connect"),
        (["--mcp", "'unclosed"], "dial-runtime serve: --mcp: cannot read the command"),
        (["--domain", "tests.web_domains:WebNotes", "--trust-read-only"], "--trust-read-only needs --mcp"),
    ],
)
def test_serve_refuses_an_mcp_setting_it_cannot_use(options: list[str], message: str) -> None:
    command = [sys.executable, "-m", "dial_runtime.cli", "serve", "--agent", "script:/dev/null", *options]
    done = subprocess.run(
        [*command, "--store", "memory:"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
