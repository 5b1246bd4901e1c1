"""The web surface page's ``dial-runtime serve`` line runs as pasted in a checkout, and the script it serves can be
clicked through on the notes domain: a suggestion to accept, a read-only action that runs at once, a choice, a
destructive suggestion, and the script's last words."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import httpx

from ..docs.pages import DOCS, blocks
from ..web_server import decode, run_input
from .test_web_serve import serving_in_a_terminal

CHECKOUT = Path(__file__).parents[2]


def documented_serve_line() -> list[str]:
    """The ``dial-runtime serve`` command of the web surface page, split as a shell splits it."""
    shown = blocks("sh", page=DOCS / "how-to" / "web.md")[0].code
    (line,) = [line for line in shown.splitlines() if line.startswith("dial-runtime serve ")]
    return shlex.split(line)


def resolved(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The resume entries that accept each interrupt a run ended with."""
    return [
        {"interruptId": each["id"], "status": "resolved", "payload": {"approved": True}}
        for each in events[-1]["outcome"].get("interrupts", [])
    ]


def test_the_documented_serve_line_runs_as_pasted_and_its_script_can_be_clicked_through(tmp_path: Path) -> None:
    """In a folder laid out as a checkout (``examples/`` beside where the command runs)."""
    (tmp_path / "examples").symlink_to(CHECKOUT / "examples")
    program, command, *options = documented_serve_line()
    assert (program, command) == ("dial-runtime", "serve")
    with (
        serving_in_a_terminal(*options, output=tmp_path / "serve.log", cwd=tmp_path) as (url, _),
        httpx.Client(timeout=20) as client,
    ):

        def run(**body: Any) -> list[dict[str, Any]]:
            return decode(client.post(f"{url}/agui", json=run_input("tour", **body)).text)

        said = run(words="add a note: buy milk")
        assert [each["metadata"]["action"] for each in said[-1]["outcome"]["interrupts"]] == ["add-note"]
        accepted = run(resume=resolved(said))
        results = [json.loads(event["content"]) for event in accepted if event["type"] == "TOOL_CALL_RESULT"]
        assert [(each["action"], each["status"]) for each in results] == [
            ("add-note", "done"),
            ("list-notes", "done"),
        ]
        assert results[-1]["result"] == {"notes": ["buy milk"]}
        (choice,) = accepted[-1]["outcome"]["interrupts"]
        assert choice["message"] == "Shall I tidy up?"
        answered = run(resume=[{"interruptId": choice["id"], "status": "resolved", "payload": {"answer": "yes"}}])
        (removal,) = answered[-1]["outcome"]["interrupts"]
        assert removal["metadata"]["destructive"] is True
        removed = run(resume=resolved(answered))
        assert "That is the end of this script." in "".join(event.get("delta", "") for event in removed)
        assert removed[-1]["outcome"] == {"type": "success"}
    assert (tmp_path / "chat.db").is_file()
