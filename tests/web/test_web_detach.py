"""A run whose client goes away (a real uvicorn server, httpx as the client, a streaming chat-completions agent):
told first that the run should go on (``POST /agui/detach``), the server lets it end in the log, and a snapshot
taken meanwhile, on this worker or another, says a turn is running and makes up no notice; a detach that names
an unknown run, or someone else's, changes nothing, and that run stops after the grace."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dial_runtime import LogEntry, agent_from_uri
from dial_runtime.errors import StoreError
from dial_runtime.stores import SQLiteStore
from dial_runtime.views.person import Notice, project
from dial_runtime.web import create_app

from ..fakes import envelope
from ..openai_server import OpenAIServer, Reply
from ..web_domains import WebNotes
from ..web_server import decode, run_input, serving, stored_log

STORY = "Once upon a time there was a keeper of a lighthouse, who told it slowly."
#: Streamed in pieces this far apart: long enough for a test to act while it streams, short enough to wait for.
PIECES, INTERVAL = 12, 0.25
#: How long a test waits for the log to reach a state (a turn's end, a stop after the grace).
SETTLES_WITHIN = 10.0


def wait_for_log(store: Path, conversation: str, kind: str) -> list[LogEntry]:
    """The log, once it holds an event of type ``kind`` (``SETTLES_WITHIN`` seconds at most)."""
    deadline = time.monotonic() + SETTLES_WITHIN
    while True:
        log = stored_log(store, conversation)
        if kind in [entry.event.type for entry in log]:
            return log
        assert time.monotonic() < deadline, f"the log holds no {kind}"
        time.sleep(0.05)


def notices(log: list[LogEntry]) -> list[str]:
    return [item.text for item in project(log).items if isinstance(item, Notice)]


@contextlib.contextmanager
def server(store: Path, model: OpenAIServer) -> Iterator[httpx.Client]:
    """A worker on ``store`` whose agent is ``model``; the caller is the ``x-user`` header's principal."""
    app = create_app(
        store=f"sqlite:{store}",
        domain=WebNotes(),
        agent=lambda conversation, log: agent_from_uri(f"{model.base_url}#m", max_retries=0),
        auth=lambda request: request.headers.get("x-user") or None,
    )
    with serving(app) as url, httpx.Client(base_url=url, timeout=10.0, headers={"x-user": "ada"}) as client:
        yield client


@contextlib.contextmanager
def streaming_run(client: httpx.Client, body: dict[str, Any]) -> Iterator[None]:
    """A run started on ``client``, read until the agent's text streams in; the block runs with the request open,
    which is closed after it (the client goes away)."""
    with client.stream("POST", "/agui", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and '"TEXT_MESSAGE_CONTENT"' in line:
                break
        yield


def snapshot(client: httpx.Client, thread: str) -> list[dict[str, Any]]:
    response = client.post("/agui", json=run_input(thread))
    assert response.status_code == 200, response.text
    return decode(response.text)


@pytest.mark.parametrize(
    ("where", "answer"),
    [("the run's worker", {"detached": True}), ("another worker", {"detached": True, "noted": True})],
)
def test_a_detached_run_ends_in_the_log_and_a_snapshot_meanwhile_says_it_runs(
    tmp_path: Path, where: str, answer: dict[str, bool]
) -> None:
    """The page's beacon lands on the run's worker, or on another (``serve --workers 2``), where it is noted in the
    store's database for the run's worker to read once its client has gone and the grace has passed."""
    store = tmp_path / "c.db"
    reply = Reply(envelope(f"<dial-inform>{STORY}</dial-inform>"), chunks=PIECES, interval=INTERVAL)
    with OpenAIServer([reply]) as model, server(store, model) as first, server(store, model) as second:
        body = run_input("tale", words="tell me a story")
        with streaming_run(first, body):
            told = first if where == "the run's worker" else second
            detached = told.post("/agui/detach", json={"threadId": "tale", "runId": body["runId"]})
            assert detached.status_code == 202 and detached.json() == answer, detached.text
        for worker in (first, second):  # this worker knows the run; the other finds the lock held
            events = snapshot(worker, "tale")
            assert events[-1]["metadata"]["running"] is True
            assert events[-1]["outcome"] == {"type": "success"}
            assert [m for m in events[1]["messages"] if m["role"] == "activity"] == []  # no made-up notice
        log = wait_for_log(store, "tale", "finished")
        assert "interrupted" not in [entry.event.type for entry in log] and notices(log) == []
        ended = snapshot(second, "tale")
        assert "running" not in ended[-1]["metadata"]
        assert {"role": "assistant", "content": STORY} in [
            {"role": m["role"], "content": m.get("content")} for m in ended[1]["messages"]
        ]


def test_a_detach_for_a_run_unknown_or_someone_elses_changes_nothing(tmp_path: Path) -> None:
    """Refused where the run is served (someone else's, a foreign origin, no JSON, nobody signed in); noted for
    another worker when the run is not here (an unknown id, or someone else's detach reaching another worker),
    where it counts for nothing: the run stops after the grace, cancelled by its own principal."""
    store = tmp_path / "c.db"
    never_ends = Reply(envelope(f"<dial-inform>{STORY}</dial-inform>"), chunks=PIECES, hold_after=PIECES // 2)
    with OpenAIServer([never_ends]) as model, server(store, model) as client, server(store, model) as other:
        body = run_input("kept", words="tell me a story")
        run_id = body["runId"]
        with streaming_run(client, body):
            noted = [
                client.post("/agui/detach", json={"threadId": "kept", "runId": "no-such-run"}),
                other.post("/agui/detach", json={"threadId": "kept", "runId": run_id}, headers={"x-user": "eve"}),
            ]
            refusals = [
                client.post("/agui/detach", json={"threadId": "kept", "runId": run_id}, headers={"x-user": "eve"}),
                client.post(
                    "/agui/detach",
                    json={"threadId": "kept", "runId": run_id},
                    headers={"origin": "https://elsewhere.example"},
                ),
                client.post("/agui/detach", content=b"not json"),
                client.post("/agui/detach", json={"threadId": "kept"}, headers={"x-user": ""}),
            ]
        assert [response.status_code for response in noted] == [202, 202]
        assert [response.status_code for response in refusals] == [404, 403, 422, 401]
        assert all(set(response.json()) == {"error"} for response in refusals)
        log = wait_for_log(store, "kept", "finished")
    (interrupted,) = [entry.event for entry in log if entry.event.type == "interrupted"]
    assert interrupted.reason == "cancelled by ada"
    assert notices(log) == ["the agent's turn stopped: cancelled by ada"]


class UnreachableDetaches:
    """Detaches kept in a database that cannot be reached."""

    def note(self, conversation_id: str, run_id: str, principal: str) -> None:
        raise StoreError("the database went away")

    def noted(self, conversation_id: str, run_id: str, principal: str) -> bool:
        raise StoreError("the database went away")


class StoreWithoutItsDatabase(SQLiteStore):
    def detaches(self) -> UnreachableDetaches:  # type: ignore[override]
        return UnreachableDetaches()


def test_a_detach_that_cannot_be_noted_is_refused_and_the_run_stops(tmp_path: Path) -> None:
    """The shared database failing: a detach for another worker's run is refused 503 in one line, and the run's
    worker, unable to read it, stops the run after the grace as a closed request says."""
    store = tmp_path / "c.db"
    never_ends = Reply(envelope(f"<dial-inform>{STORY}</dial-inform>"), chunks=PIECES, hold_after=PIECES // 2)
    app = create_app(
        store=StoreWithoutItsDatabase(store),
        domain=WebNotes(),
        agent=lambda conversation, log: agent_from_uri(f"{model.base_url}#m", max_retries=0),
        auth=lambda request: request.headers.get("x-user") or None,
    )
    with (
        OpenAIServer([never_ends]) as model,
        serving(app) as url,
        httpx.Client(base_url=url, timeout=10.0, headers={"x-user": "ada"}) as client,
    ):
        body = run_input("kept", words="tell me a story")
        with streaming_run(client, body):
            refused = client.post("/agui/detach", json={"threadId": "kept", "runId": "elsewhere"})
        assert refused.status_code == 503 and set(refused.json()) == {"error"}
        log = wait_for_log(store, "kept", "finished")
    (interrupted,) = [entry.event for entry in log if entry.event.type == "interrupted"]
    assert interrupted.reason == "cancelled by ada"
