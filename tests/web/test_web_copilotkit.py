"""A third-party AG-UI front end's own client against the web surface: CopilotKit's core (``@copilotkit/core``,
which runs agents over the ``@ag-ui/client`` it ships and answers interrupts with its own interrupt state), on
Node. AG-UI's interrupt pattern as such a client reads it: an interrupted run is never reported as success, an
interrupt says when it expires (and the client then refuses to answer it, abandoning it instead), each decision
is one resume entry (with the tool result CopilotKit adds beside it), and a resume the server cannot read decides
nothing. ``.ci/run`` installs the package with ``npm ci``."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dial_runtime.web import create_app, scripted_agents

from ..fakes import envelope, suggest
from ..web_domains import WebNotes
from ..web_server import serving, stored_log

CLIENT = Path(__file__).parents[1] / "copilotkit_node"
ADD = envelope(suggest("add-note", '{"text":"milk"}'), prose="Adding it.")
ACK = '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>'
SCRIPTS: dict[str, list[str]] = {}


def copilotkit(url: str, thread: str, decision: str) -> Any:
    """Run the CopilotKit client on ``thread``, answering its interrupt with ``decision``: what it saw."""
    program = shutil.which("node")
    if program is None or not (CLIENT / "node_modules" / "@copilotkit" / "core").is_dir():
        pytest.fail(
            "the CopilotKit client test needs node and `npm ci` in tests/copilotkit_node (.ci/run does both)"
        )
    SCRIPTS[thread] = [ADD, ACK]
    done = subprocess.run(
        [program, "interrupts.mjs", f"{url}/agui", thread, decision],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("copilotkit") / "c.db"


@pytest.fixture(scope="module")
def url(store: Path) -> Iterator[str]:
    app = create_app(
        store=f"sqlite:{store}",
        domain=WebNotes(),
        agent=scripted_agents(SCRIPTS),
        decide_timeout=1.0,
    )
    with serving(app, lifespan="on") as served:  # the server fires the deadlines it gave
        yield served


def outcomes(store: Path, thread: str) -> list[tuple[str, str]]:
    return [
        (entry.event.id, entry.event.status)
        for entry in stored_log(store, thread)
        if entry.event.type == "outcome"
    ]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("decision", "status"), [("accept", "done"), ("dismiss", "dismissed")])
def test_copilotkit_runs_to_an_interrupt_and_its_decision_resumes_the_run(
    url: str, store: Path, decision: str, status: str
) -> None:
    thread = f"ck-{decision}"
    seen = copilotkit(url, thread, decision)
    first, interrupt, action, second = seen["first"], seen["interrupt"], seen["action"], seen["second"]
    assert first["outcome"]["type"] == "interrupt", "an interrupted run is never a success"
    assert first["error"] is None and first["failed"] is None
    assert (interrupt["id"], interrupt["reason"], interrupt["toolCallId"]) == ("sg-1", "tool_call", "sg-1")
    assert interrupt["expiresAt"].endswith("Z"), "the card's deadline, as the client judges expiry"
    assert action["kind"] == "resume" and len(action["resume"]) == 1, "one resume entry per decision"
    assert second["failed"] is None and second["outcome"] == {"type": "success"}
    assert second["results"] == ["sg-1"]
    assert outcomes(store, thread) == [("sg-1", status)]


def test_an_interrupt_past_its_expiry_is_abandoned_by_the_client_and_nothing_runs(url: str, store: Path) -> None:
    seen = copilotkit(url, "ck-late", "wait-then-accept")
    assert seen["action"]["expired"], "the client read expiresAt and would not answer"
    assert seen["action"]["resume"] == [{"interruptId": "sg-1", "status": "cancelled"}]
    assert seen["second"]["failed"] is None
    deadline = time.monotonic() + 10  # the server's own timer expires it (it fires with nobody watching)
    while not outcomes(store, "ck-late") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert outcomes(store, "ck-late") == [("sg-1", "dismissed")], "expired on the server, not run"


def test_a_resume_the_server_cannot_read_decides_nothing(url: str, store: Path) -> None:
    seen = copilotkit(url, "ck-bad", "malformed")
    assert seen["second"]["failed"] is not None and "approved" in seen["second"]["failed"]["message"]
    assert outcomes(store, "ck-bad") == [], "deny by default: nothing ran, the card still waits"
