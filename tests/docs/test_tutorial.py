"""The tutorial's terminal and web panel steps, run as a reader runs them: in a folder holding the files the
tutorial wrote (its blocks titled ``tasks.py`` and ``replies.json``), the ``dial-runtime chat`` and ``dial-runtime
serve`` lines it shows, clicked through as it describes. Its Python blocks run in ``test_pages.py``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..terminal.test_terminal import Terminal
from ..web.test_serve_docs import resolved
from ..web.test_web_serve import serving_in_a_terminal
from ..web_server import decode, run_input, stored_log
from .pages import DOCS, blocks

TUTORIAL = DOCS / "tutorial.md"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding every file the tutorial writes."""
    for block in blocks(None, page=TUTORIAL):
        if block.title:
            (tmp_path / block.title).write_text(block.code, encoding="utf-8")
    assert {path.name for path in tmp_path.iterdir()} == {"tasks.py", "replies.json"}
    return tmp_path


def shown(command: str) -> list[str]:
    """The tutorial's ``dial-runtime COMMAND`` line with a scripted agent, split as a shell splits it."""
    lines = [line for block in blocks("sh", page=TUTORIAL) for line in block.code.splitlines()]
    (line,) = [line for line in lines if line.startswith(f"dial-runtime {command} --agent script:")]
    return shlex.split(line)[1:]


def test_the_terminal_step(folder: Path) -> None:
    term = Terminal(*shown("chat"), cwd=folder)
    try:
        term.type("remind me to water the plants", after="you:")
        term.expect("sg-1 · add-task", "Add the task 'water the plants'")
        term.type("a", after="sg-1 ›")
        term.expect("✓ done: Add the task 'water the plants'", "Here is your list.", "That is all I know.")
        term.type("/quit", after="you:")
        assert term.finish() == 0
    finally:
        if term.child.isalive():
            term.child.terminate(force=True)


def test_the_web_panel_step(folder: Path) -> None:
    with (
        serving_in_a_terminal(*shown("serve")[1:], output=folder / "serve.log", cwd=folder) as (url, _),
        httpx.Client(timeout=20) as client,
    ):
        assert "<dial-chat" in client.get(f"{url}/").text

        def run(**body: Any) -> list[dict[str, Any]]:
            return decode(client.post(f"{url}/agui", json=run_input("tutorial", **body)).text)

        said = run(words="remind me to water the plants")
        assert [each["metadata"]["action"] for each in said[-1]["outcome"]["interrupts"]] == ["add-task"]
        accepted = run(resume=resolved(said))
        results = [json.loads(event["content"]) for event in accepted if event["type"] == "TOOL_CALL_RESULT"]
        statuses = [(each["action"], each["status"]) for each in results]
        assert statuses == [("add-task", "done"), ("list-tasks", "done")]
        assert results[-1]["result"] == {"water the plants": False}
    # Kept in the SQLite file the tutorial named: the conversation outlives the server.
    stored = stored_log(folder / "tasks.db", "tutorial")
    assert [entry.event.status for entry in stored if entry.event.type == "outcome"] == ["done", "done"]
