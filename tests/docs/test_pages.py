"""The README and the documentation site as a new user reads them: every ``python`` block runs as pasted, every
``dial-runtime`` command shown is one the command line takes, the agent reply shown on the home page parses,
validates and runs, and the reference's tables name exactly what the code has.

A block that cannot run here (it needs a hosted model) says so in an HTML comment right before it,
``<!-- not run: needs a hosted model -->``; it is still compiled. A block that runs against a local model server
says which, ``<!-- runs against: llama-server -->``: the tests start one (Qwen2.5-Coder-0.5B, as the model tests
do), give the block its address as ``LLAMA_HOST`` and let it run longer. Every other ``python`` block runs as a
program of its own, in a fresh interpreter in an empty git repository holding the blocks of its page titled with a
file name before it (```` ```python title="tasks.py" ````), and fails the test when it raises or does not finish in
time.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dial_runtime import Conversation, ScriptedAgent, parse, policy_human
from dial_runtime.cli import build_parser
from dial_runtime.demo import NotesDomain
from dial_runtime.language.schema import validate
from dial_runtime.runtime.events import EVENT_TYPES, RENDERED
from dial_runtime.statemachines.diagrams import MACHINES, render_mermaid

from .pages import DOCS, PAGES, README, ROOT, Block, blocks, name

#: How long one block may run: the slowest starts an MCP server and holds a conversation.
BLOCK_TIMEOUT = 60.0
#: How long a block that talks to a local model server may run: a few conversations with a small model on CPU.
SERVED_TIMEOUT = 600.0
#: The page that shows every command's synopsis rather than commands to paste.
CLI_PAGE = DOCS / "reference" / "cli.md"


# --- every python block runs ------------------------------------------------------------------------------------

PROGRAMS = [(page, block) for page in PAGES for block in blocks("python", page=page) if block.title is None]


@pytest.fixture(scope="module")
def llama_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A llama-server serving Qwen for the blocks that run against one: its ``HOST:PORT``."""
    from ..llm.test_llama import llama_server, qwen

    with llama_server(tmp_path_factory.mktemp("llama") / "server.log", qwen()) as (url, _):
        yield url.removeprefix("http://")


def test_the_pages_have_python_blocks_and_few_exceptions() -> None:
    assert len(PROGRAMS) >= 15
    assert sum(block.not_run is not None for _, block in PROGRAMS) <= 3
    assert any(page == README for page, _ in PROGRAMS)


def files_before(page: Path, block: Block) -> dict[str, str]:
    """The blocks of ``page`` titled with a file name, before ``block``: the files a reader made by then."""
    return {each.title: each.code for each in blocks(None, page=page) if each.title and each.line < block.line}


@pytest.mark.parametrize(
    ("page", "block"),
    [pytest.param(p, b, marks=[pytest.mark.llama] if b.server else []) for p, b in PROGRAMS],
    ids=[f"{name(p)}:{b.line}" for p, b in PROGRAMS],
)
def test_a_python_block_runs_as_pasted(
    page: Path, block: Block, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = f"{name(page)}:{block.line}"
    compile(block.code, where, "exec")
    if block.not_run is not None:
        return  # a block that says why it cannot run here (a model server) is checked by compiling it only
    # An empty git repository: the MCP block works on the repository it runs in.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=BLOCK_TIMEOUT)
    for file, code in files_before(page, block).items():
        (tmp_path / file).write_text(code, encoding="utf-8")
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    # The interpreter's own scripts (mcp-server-git) first on PATH, as in an activated environment.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if block.server is not None:
        assert block.server == "llama-server", f"{where}: runs against an unknown server {block.server!r}"
        env["LLAMA_HOST"] = request.getfixturevalue("llama_host")
    ran = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT if block.server is None else SERVED_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 0, f"{where} raised:\n{ran.stderr[-3000:]}"


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("```python\nx = 1\n```\n", [("x = 1\n", None, None, None)]),
        ("<!-- not run: a model server -->\n```python\ny()\n```\n", [("y()\n", "a model server", None, None)]),
        ("<!-- not run: a server -->\n\ntext\n```python\nz\n```\n", [("z\n", None, None, None)]),
        ("```sh\nls\n```\n```python\na\n```\n", [("a\n", None, None, None)]),
        ('```python title="tasks.py"\nb = 2\n```\n', [("b = 2\n", None, "tasks.py", None)]),
        ("<!-- runs against: llama-server -->\n```python\nc\n```\n", [("c\n", None, None, "llama-server")]),
    ],
)
def test_blocks_are_extracted_with_their_marks(
    markdown: str, expected: list[tuple[str, str | None, str | None, str | None]]
) -> None:
    found = [(block.code, block.not_run, block.title, block.server) for block in blocks("python", markdown)]
    assert found == expected


def test_a_block_that_raises_fails(tmp_path: Path) -> None:
    """The check the block test makes: a block that raises exits non-zero."""
    (tmp_path / "block.py").write_text(readme_like_failure(), encoding="utf-8")
    ran = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True, timeout=BLOCK_TIMEOUT)
    assert ran.returncode != 0


def readme_like_failure() -> str:
    """A block as the README's were before they were made whole: an agent it never defines."""
    return "from dial_runtime import Conversation, policy_human\nConversation(agent=agent, human=policy_human())\n"


# --- every command shown is one the command line takes ----------------------------------------------------------


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """A shell block's commands with the line each starts on, lines ending in a backslash joined to the next."""
    found: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for offset, text in enumerate(block.code.splitlines(), start=block.line + 1):
        start, joined = pending if pending is not None else (offset, "")
        joined += text
        pending = (start, joined[:-1]) if joined.endswith("\\") else None
        if pending is None:
            found.append((start, joined))
    return found


COMMANDS = [
    (page, line, command)
    for page in PAGES
    if page != CLI_PAGE
    for block in blocks("sh", page=page)
    for line, command in shell_lines(block)
    if re.match(r"^(\S*/)?dial-runtime ", command)
]


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) >= 8
    assert {page.name for page, _, _ in COMMANDS} >= {"README.md", "tutorial.md", "web.md"}


@pytest.mark.parametrize(("page", "line", "command"), COMMANDS, ids=[f"{name(p)}:{n}" for p, n, _ in COMMANDS])
def test_a_command_shown_is_one_the_parser_takes(page: Path, line: int, command: str) -> None:
    """Parsed by the command's own parser, as a shell splits it (a comment after it is the shell's too)."""
    words = shlex.split(command, comments=True)
    try:
        build_parser().parse_args(words[1:])
    except SystemExit as refused:
        pytest.fail(f"{name(page)}:{line}: the command line refuses `{command}` (exit {refused.code})")


# --- the pages link into each other -----------------------------------------------------------------------------


def test_the_readme_is_a_page_long_and_every_link_of_it_exists() -> None:
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", readme)
    assert {"docs/tutorial.md", "docs/index.md"} <= set(links)
    assert [link for link in links if not (ROOT / link).exists()] == []


# --- the reply shown on the home page --------------------------------------------------------------------------


def reply_blocks() -> tuple[str, str]:
    """The two ``xml`` blocks of the home page's "What a conversation looks like": the agent's reply and the
    runtime's answer."""
    reply, answer = [block.code for block in blocks("xml", page=DOCS / "index.md")][:2]
    return reply, answer


def test_the_shown_reply_parses_and_validates_strictly() -> None:
    reply, _ = reply_blocks()
    envelope = parse(reply)
    assert envelope is not None and envelope.issues == ()
    assert [element.type for element in envelope.elements] == ["dial-inform", "dial-suggest"]
    assert envelope.elements[1].payload == {"text": "buy milk"}
    assert validate(envelope.raw, strict=True) == []


@pytest.mark.anyio
async def test_the_shown_reply_runs_and_the_shown_answer_is_what_the_agent_gets() -> None:
    reply, answer = reply_blocks()
    agent = ScriptedAgent([reply, "<dial><dial-inform>Added.</dial-inform></dial>"])
    conversation = Conversation(agent=agent, domain=NotesDomain(), human=policy_human("accept"))
    result = await conversation.say("add a note: buy milk")
    assert [(outcome.id, outcome.status) for outcome in result.outcomes] == [("sg-1", "done")]
    assert agent.sent[1].startswith(answer.rstrip("\n") + "\n")
    assert validate(answer, strict=False) == []


# --- the event table --------------------------------------------------------------------------------------------


EVENTS_PAGE = DOCS / "reference" / "events.md"


def event_table() -> dict[str, list[str]]:
    """The rows of the events page's table: each event type and the fields its row names."""
    section = EVENTS_PAGE.read_text(encoding="utf-8")
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) == 2:
            # Each field is the first `name` of an item; explanations in parentheses follow some.
            items = re.split(r",\s*(?![^()]*\))", cells[1])
            rows[cells[0].strip("`")] = [re.findall(r"`([^`]+)`", item)[0] for item in items]
    return rows


def test_the_event_table_names_every_rendered_event_and_all_its_fields() -> None:
    table = event_table()
    assert set(table) == set(RENDERED)
    for kind, fields in table.items():
        assert [field.name for field in msgspec.structs.fields(EVENT_TYPES[kind])] == fields, kind


def test_the_events_page_lists_every_log_only_event() -> None:
    page = EVENTS_PAGE.read_text(encoding="utf-8")
    paragraph = page.split("also holds what the state depends on", 1)[1]
    paragraph = paragraph.split("\n\n", 1)[0]
    assert set(re.findall(r"`([a-z-]+)`", paragraph)) == set(EVENT_TYPES) - RENDERED


# --- the lifecycle diagram --------------------------------------------------------------------------------------

EDGE = re.compile(r"^\s*(\S+) --> (\S+)(?: : (\S+(?: / \S+)*))?")


def edges(mermaid: str) -> set[tuple[str, str, str]]:
    """A Mermaid state diagram's transitions as (source, target, event); ``a / b`` is two events."""
    found = set()
    for line in mermaid.splitlines():
        match = EDGE.match(line)
        if match:
            source, target, events = match.groups()
            found.update((source, target, event) for event in (events or "").split(" / "))
    return found


def test_the_lifecycle_diagram_draws_only_transitions_the_machine_has() -> None:
    """The lifecycle page draws the main transitions (the prose names the rest); each is one the compiled machine
    has, and every state is in it."""
    (drawn,) = blocks("mermaid", page=DOCS / "explanation" / "lifecycle.md")
    machine = edges(render_mermaid(MACHINES["suggestion_lifecycle"]))
    shown = edges(drawn.code)
    assert shown <= machine, shown - machine
    assert states(shown) == states(machine)


def states(transitions: set[tuple[str, str, str]]) -> set[str]:
    return {state for source, target, _ in transitions for state in (source, target)} - {"[*]"}


# --- the API table ----------------------------------------------------------------------------------------------

CALL = re.compile(r"^(?P<name>\.?[A-Za-z_][\w.]*)\((?P<params>.*)\)$")


def api_rows(column: int = 0) -> list[list[str]]:
    """The backticked items of a column of each row of the API page's table of names (``-1``: whole rows)."""
    readme = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    table = readme.split("\n| name | what it is |\n", 1)[1].split("\n\n", 1)[0]
    rows = [row if column < 0 else row.split(" | ")[column] for row in table.splitlines()[1:]]
    return [re.findall(r"`([^`]+)`", row) for row in rows]


def resolve(name: str, owner: str) -> Any:
    """What a name in the table is: a top-level name or one of the modules the table points to; ``.name`` is a
    member of ``owner``, the row's last name before it (``Conversation`` when there is none)."""
    import dial_runtime

    path = (owner + name if name.startswith(".") else name).split(".")
    homes = ["dial_runtime.language", "dial_runtime.llm", "dial_runtime.errors", "dial_runtime.ports"]
    homes += ["dial_runtime.views.person", "dial_runtime.driver.replay", "dial_runtime.runtime.events"]
    found = [vars(importlib.import_module(home)).get(path[0]) for home in homes]
    value = getattr(dial_runtime, path[0]) if path[0] in dial_runtime.__all__ else next(v for v in found if v)
    for part in path[1:]:
        value = getattr(value, part)
    return value


def documented_parameters(params: str) -> list[tuple[str, str, bool]]:
    """``a, *, b=1, **c`` as (name, kind, has a default) in order."""
    found, kind = [], "positional"
    for param in (part.strip() for part in params.split(",") if part.strip()):
        if param == "*":
            kind = "keyword"
        elif param.startswith("**"):
            found.append((param[2:], "var-keyword", False))
        else:
            found.append((param.split("=")[0], kind, "=" in param))
    return found


def actual_parameters(value: Any) -> list[tuple[str, str, bool]]:
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
        inspect.Parameter.VAR_KEYWORD: "var-keyword",
    }
    parameters = [p for p in inspect.signature(value).parameters.values() if p.name != "self"]
    return [(p.name, kinds[p.kind], p.default is not inspect.Parameter.empty) for p in parameters]


def test_every_signature_in_the_api_table_is_the_codes() -> None:
    checked = 0
    for row in api_rows():
        owner = "Conversation"
        for item in row:
            if not item.startswith("."):
                owner = item.split("(")[0]
            call = CALL.match(item)
            if call:
                value = resolve(call["name"], owner)
                assert documented_parameters(call["params"]) == actual_parameters(value), item
                checked += 1
    assert checked >= 25


def test_the_api_table_names_every_public_name() -> None:
    import dial_runtime

    named = {item.split("(")[0] for row in api_rows(-1) for item in row}
    assert set(dial_runtime.__all__) - {"__version__"} <= named


# --- the command line -------------------------------------------------------------------------------------------


def test_the_command_lines_shown_are_the_parsers() -> None:
    """The command line page shows each command once, with exactly the options its parser takes."""
    usage = blocks("sh", page=CLI_PAGE)[0].code
    shown: dict[str, set[str]] = {}
    command = ""
    for line in usage.splitlines():
        text = line.split("  #", 1)[0]
        if text.startswith("dial-runtime "):
            command = text.split()[1]
            assert command not in shown or command == "diagrams", f"{command} is shown twice"
        shown.setdefault(command, set()).update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", text))
    parser = build_parser()
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    assert set(shown) == set(commands.choices)
    for command, subparser in commands.choices.items():
        options = [set(action.option_strings) for action in subparser._actions if action.option_strings]
        taken = [flags for flags in options if flags & shown[command] and "--help" not in flags]
        assert len(taken) == len(options) - 1, f"{command}: not shown: {[o for o in options if o not in taken]}"
        assert shown[command] <= set().union(*options), (
            f"{command}: no such option: {shown[command] - set().union(*options)}"
        )
