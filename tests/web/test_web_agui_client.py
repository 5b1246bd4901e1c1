"""A real AG-UI client nobody here wrote (``@ag-ui/client``'s ``HttpAgent``, on Node) holds conversations with the
web surface: an interrupt and its resume, several cards decided one at a time under its coverage rule, and a run
it stops with ``abortRun``. ``.ci/run`` installs it with ``npm ci``."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dial_runtime import agent_from_uri
from dial_runtime.views.person import Notice, project
from dial_runtime.web import create_app, scripted_agents

from ..fakes import envelope, suggest
from ..openai_server import OpenAIServer, Reply
from ..web_domains import WebNotes
from ..web_server import serving, stored_log

CLIENT = Path(__file__).parents[1] / "agui_node"
SCRIPTS = {
    "node-1": [
        envelope(suggest("add-note", '{"text":"milk"}'), prose="Adding it."),
        '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>',
    ],
    "node-cards": [
        envelope(suggest("add-note", '{"text":"milk"}'), suggest("add-note", '{"text":"eggs"}')),
        envelope(suggest("add-note", '{"text":"bread"}'), prose="And bread?"),
        "<dial><dial-inform>Fine, nothing more.</dial-inform></dial>",
    ],
}
#: How long the log may take to record a stop after the client closed its request.
STOPPED_WITHIN = 10.0


def node(script: str, *arguments: str) -> Any:
    """Run ``script`` of tests/agui_node with ``arguments``; the JSON line it printed last."""
    program = shutil.which("node")
    if program is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client test needs node and `npm ci` in tests/agui_node (.ci/run does both)")
    done = subprocess.run(
        [program, script, *arguments], cwd=CLIENT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("node") / "c.db"


@pytest.fixture(scope="module")
def base_url(store: Path) -> Iterator[str]:
    with serving(create_app(store=f"sqlite:{store}", domain=WebNotes(), agent=scripted_agents(SCRIPTS))) as url:
        yield url


def test_httpagent_runs_to_an_interrupt_and_resumes_it(base_url: str) -> None:
    seen = node("run.mjs", f"{base_url}/agui", "node-1", "add milk")
    first, second, interrupt = seen["first"], seen["second"], seen["interrupt"]
    assert first["types"][0] == "RUN_STARTED" and first["types"][-1] == "RUN_FINISHED"
    assert {"TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"} <= set(first["types"])
    assert first["outcome"]["type"] == "interrupt" and first["error"] is None
    assert (interrupt["id"], interrupt["reason"], interrupt["toolCallId"]) == ("sg-1", "tool_call", "sg-1")
    assert second["error"] is None and second["outcome"] == {"type": "success"}
    assert second["results"] == [["sg-1", "done"]]
    roles = [message["role"] for message in seen["messages"]]
    assert roles[0] == "user" and "tool" in roles
    assert {"role": "assistant", "content": "Added."} in seen["messages"]


def test_httpagent_decides_two_cards_one_at_a_time_then_says_something_else(base_url: str, store: Path) -> None:
    """Its coverage rule has every resume answer every open interrupt: a card not decided yet is cancelled, and
    stays waiting; new words with a card cancelled supersede it."""
    seen = node("cards.mjs", f"{base_url}/agui", "node-cards")
    assert seen["shown"] == ["sg-1", "sg-2"]
    assert seen["edited"]["error"] is None and seen["edited"]["results"] == [["sg-1", "done"]]
    assert seen["left"] == ["sg-2"]
    assert seen["dismissed"]["error"] is None and seen["dismissed"]["results"] == [["sg-2", "dismissed"]]
    assert seen["third"] == ["sg-3"]
    assert seen["said"]["error"] is None and seen["said"]["outcome"] == {"type": "success"}
    assert seen["said"]["results"] == [["sg-3", "superseded"]]
    assert seen["after"] == []
    assert {"role": "assistant", "content": "Fine, nothing more."} in seen["messages"]
    decided = [entry.event for entry in stored_log(store, "node-cards") if entry.event.type == "decided"]
    assert [(each.suggestion_id, each.decision) for each in decided] == [
        ("sg-1", "edit"),
        ("sg-2", "dismiss"),
        ("sg-3", "say"),
    ]


def test_httpagent_abort_run_stops_the_run_and_the_log_says_who(tmp_path: Path) -> None:
    story = envelope("<dial-inform>Once upon a time there was a keeper of a lighthouse.</dial-inform>")
    with OpenAIServer([Reply(story, chunks=8, hold_after=2)]) as model:
        app = create_app(
            store=f"sqlite:{tmp_path / 'c.db'}",
            domain=WebNotes(),
            agent=lambda conversation, log: agent_from_uri(f"{model.base_url}#m", max_retries=0),
            auth=lambda request: request.headers.get("x-user"),
        )
        with serving(app) as url:
            seen = node("stop.mjs", f"{url}/agui", "stopped", "ada")
            assert "TEXT_MESSAGE_CONTENT" in seen["types"] and "RUN_FINISHED" not in seen["types"]
            assert seen["failed"] is None
            assert seen["error"] == {"code": "abort", "message": "This operation was aborted"}  # the client's own
            deadline = time.monotonic() + STOPPED_WITHIN
            while "finished" not in [entry.event.type for entry in stored_log(tmp_path / "c.db", "stopped")]:
                assert time.monotonic() < deadline, "the stopped run was not logged"
                time.sleep(0.05)
    log = stored_log(tmp_path / "c.db", "stopped")
    (interrupted,) = [entry.event for entry in log if entry.event.type == "interrupted"]
    assert interrupted.reason == "cancelled by ada"
    notices = [item.text for item in project(log).items if isinstance(item, Notice)]
    assert notices == ["the agent's turn stopped: cancelled by ada"]
