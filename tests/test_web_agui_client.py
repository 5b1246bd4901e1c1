"""A real AG-UI client nobody here wrote (``@ag-ui/client``'s ``HttpAgent``, on Node) holds a conversation with the
web surface: an interrupt, a resume, the events it decoded. ``.ci/run`` installs it with ``npm ci``."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dial_runtime.web import create_app, scripted_agents

from .fakes import envelope, suggest
from .web_domains import WebNotes
from .web_server import serving

CLIENT = Path(__file__).parent / "agui_node"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    replies = [
        envelope(suggest("add-note", '{"text":"milk"}'), prose="Adding it."),
        '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>',
    ]
    store = tmp_path_factory.mktemp("node") / "c.db"
    with serving(create_app(store=f"sqlite:{store}", domain=WebNotes(), agent=scripted_agents(replies))) as url:
        yield url


def test_httpagent_runs_to_an_interrupt_and_resumes_it(base_url: str) -> None:
    node = shutil.which("node")
    if node is None or not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("the AG-UI client test needs node and `npm ci` in tests/agui_node (.ci/run does both)")
    done = subprocess.run(
        [node, "run.mjs", f"{base_url}/agui", "node-1", "add milk"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
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
