"""``dial-runtime serve``: the command starts uvicorn on the web surface; bad settings are one line and exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from dial_runtime import open_store
from dial_runtime.llm.grammar import domain_grammar

from ..fakes import envelope, suggest
from ..openai_server import OpenAIServer, Reply
from ..web_domains import WebNotes
from ..web_server import decode, free_port, run_input, server_process

COMMAND = [sys.executable, "-m", "dial_runtime.cli", "serve"]
DOMAIN = "tests.web_domains:WebNotes"
#: The scripted agent the README serves.
SCRIPT = Path(__file__).parents[2] / "examples" / "notes-replies.json"


@contextlib.contextmanager
def serve(*options: str) -> Iterator[str]:
    """``dial-runtime serve`` with ``options`` on a free port; its base URL once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with server_process([*COMMAND, *options, "--port", str(port)], f"{url}/conversations"):
        yield url


@pytest.fixture(params=["sqlite-1", "sqlite-2", "postgresql-3"])
def store_and_workers(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, int]:
    kind, _, workers = request.param.partition("-")
    url = f"sqlite:{tmp_path / 'c.db'}" if kind == "sqlite" else request.getfixturevalue("pg_schema_url")
    return url, int(workers)


def test_serve_runs_conversations_across_workers(tmp_path: Path, store_and_workers: tuple[str, int]) -> None:
    """Each request on a new connection: with several workers, runs and resumes land on any of them."""
    store, workers = store_and_workers
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("add-note", '{"text":"milk"}')), "<dial/>"]))
    names = [f"c{n}" for n in range(6)]
    with serve(
        "--agent", f"script:{script}", "--domain", DOMAIN, "--store", store, "--workers", str(workers)
    ) as url:
        waiting = {}
        for name in names:
            events = decode(httpx.post(f"{url}/agui", json=run_input(name, words="add milk"), timeout=10).text)
            (waiting[name],) = events[-1]["outcome"]["interrupts"]
        for name in names:
            resume = [{"interruptId": waiting[name]["id"], "status": "resolved", "payload": {"approved": True}}]
            events = decode(httpx.post(f"{url}/agui", json=run_input(name, resume=resume), timeout=10).text)
            assert [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["sg-1"]
            again = decode(httpx.post(f"{url}/agui", json=run_input(name, resume=resume), timeout=10).text)
            assert again[-1]["code"] == "already-decided"
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "dial-chat" in page.text
        assert httpx.get(f"{url}/conversations", timeout=10).json() == {"conversations": names}


def test_the_deadlines_given_to_serve_reach_every_worker(tmp_path: Path) -> None:
    """``--idle-timeout`` travels to the workers: a reply the model stops sending is cut there, and the agent is
    told why in the next message."""
    stalled = envelope("<dial-inform>Once upon a time there was a keeper of a lighthouse.</dial-inform>")
    with OpenAIServer() as model:
        model.add(Reply(stalled, chunks=8, hold_after=3), Reply(envelope("<dial-inform>Cut off.</dial-inform>")))
        store = f"sqlite:{tmp_path / 'c.db'}"
        options = ["--agent", f"{model.base_url}#m", "--domain", DOMAIN, "--store", store, "--workers", "2"]
        with serve(*options, "--idle-timeout", "0.5") as url:
            events = decode(httpx.post(f"{url}/agui", json=run_input("s", words="a story"), timeout=20).text)
        assert events[-1]["type"] == "RUN_FINISHED"
        assert "the idle deadline passed" in model.requests[1].messages[-1]["content"]


def test_max_turns_given_to_serve_reaches_every_worker(tmp_path: Path) -> None:
    """A read-only suggestion runs at once and needs a turn after it: with ``--max-turns 1`` the run stops at the
    turn limit, whichever worker runs it."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("list-notes", "{}")), "<dial/>"]))
    options = ["--agent", f"script:{script}", "--domain", DOMAIN, "--store", f"sqlite:{tmp_path / 'c.db'}"]
    with serve(*options, "--workers", "2", "--max-turns", "1") as url:
        events = decode(httpx.post(f"{url}/agui", json=run_input("m", words="list"), timeout=20).text)
    assert [event["name"] for event in events if event["type"] == "CUSTOM"] == ["dial.turn-limit"]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_grammar_and_generation_settings_given_to_serve_reach_every_worker(
    tmp_path: Path, workers: int
) -> None:
    """``--grammar domain`` and the settings go with the requests of every worker's agents."""
    with OpenAIServer(default=envelope("<dial-inform>Noted.</dial-inform>")) as model:
        store = f"sqlite:{tmp_path / 'c.db'}"
        options = [
            "--agent",
            f"{model.base_url}#m",
            "--domain",
            DOMAIN,
            "--store",
            store,
            "--workers",
            str(workers),
        ]
        settings = ["--grammar", "domain", "--server", "vllm", "--temperature", "0.5", "--max-tokens", "99"]
        with serve(*options, *settings) as url:
            for name in ("g1", "g2", "g3"):
                events = decode(httpx.post(f"{url}/agui", json=run_input(name, words="hi"), timeout=20).text)
                assert events[-1]["type"] == "RUN_FINISHED"
        grammar = domain_grammar(WebNotes()).gbnf
        sent = [
            (r.body["structured_outputs"], r.body["temperature"], r.body["max_tokens"]) for r in model.requests
        ]
        assert sent == [({"grammar": grammar}, 0.5, 99)] * 3


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_answers_to_the_hosts_it_is_allowed_and_to_no_other(tmp_path: Path, workers: int) -> None:
    options = ["--agent", f"script:{SCRIPT}", "--domain", DOMAIN, "--store", f"sqlite:{tmp_path / 'c.db'}"]
    hosts = ["--allowed-host", "chat.example", "--allowed-host", "*.internal.example"]
    with serve(*options, *hosts, "--workers", str(workers)) as url:
        port = url.rpartition(":")[2]
        for host, status in [
            (f"chat.example:{port}", 200),
            (f"panel.internal.example:{port}", 200),
            (f"localhost:{port}", 200),
            (f"rebound.example:{port}", 400),
        ]:
            for _ in range(workers):
                answered = httpx.get(f"{url}/conversations", headers={"host": host}, timeout=10)
                assert answered.status_code == status, (host, answered.text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "memory:", "--allowed-host", "a b"], "'a b'"),
        (["--agent", "script:/no/such.json", "--domain", DOMAIN, "--store", "memory:"], "cannot read"),
        (["--agent", "script:/dev/null", "--domain", "nope", "--store", "memory:"], "expected module:factory"),
        (["--agent", "openai:x", "--domain", "no_such_module:X", "--store", "memory:"], "cannot import"),
        (["--agent", "weird", "--domain", DOMAIN, "--store", "memory:"], "is not one of"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "ftp://x"], "store URL"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "memory:", "--workers", "0"], "--workers"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "memory:", "--max-turns", "0"], "--max-turns"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "memory:", "--decide-timeout", "0"], "above 0"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "memory:", "--max-turns", "x"], "invalid int"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(options: list[str], message: str) -> None:
    done = subprocess.run([*COMMAND, *options], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("dial-runtime serve: ")
    assert message in done.stderr


def test_a_worker_killed_mid_turn_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    """The action is running when the worker dies: the next worker shows it failed (interrupted), carries on with
    the conversation, and never runs it again."""
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            [envelope(suggest("add-note", '{"text":"milk"}')), "<dial><dial-inform>Noted.</dial-inform></dial>"]
        )
    )
    database = tmp_path / "c.db"
    options = [
        "--agent",
        f"script:{script}",
        "--domain",
        "tests.web_domains:StuckNotes",
        "--store",
        f"sqlite:{database}",
    ]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with server_process([*COMMAND, *options, "--port", str(port)], f"{url}/conversations") as worker:
        events = decode(httpx.post(f"{url}/agui", json=run_input("k", words="add milk"), timeout=10).text)
        (interrupt,) = events[-1]["outcome"]["interrupts"]
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
        with (
            httpx.Client(timeout=10) as client,
            client.stream("POST", f"{url}/agui", json=run_input("k", resume=resume)),
        ):
            deadline = time.monotonic() + 10
            while "action-started" not in stored_types(database, "k"):
                assert time.monotonic() < deadline, "the action did not start"
                time.sleep(0.05)
            worker.kill()
            worker.wait(timeout=10)
    with serve(*options) as url:
        snapshot = decode(httpx.post(f"{url}/agui", json=run_input("k"), timeout=10).text)
        results = [m for m in snapshot[1]["messages"] if m["role"] == "tool"]
        assert [json.loads(m["content"])["code"] for m in results] == ["interrupted"]
        assert snapshot[-1]["outcome"] == {"type": "success"}
        events = decode(httpx.post(f"{url}/agui", json=run_input("k", words="and now?"), timeout=10).text)
        assert "Noted." in [event.get("delta") for event in events]
    assert stored_types(database, "k").count("action-started") == 1


def stored_types(database: Path, conversation: str) -> list[str]:
    async def read() -> list[str]:
        store = open_store(f"sqlite:{database}")
        try:
            return [entry.event.type for entry in await store.read(conversation)]
        finally:
            await store.aclose()

    return anyio.run(read)


# --- the store is checked at start ------------------------------------------------------------------------------

NOT_A_DATABASE = {
    "random bytes": bytes(range(256)) * 16,
    "a text file": b"these are my notes, not a database\n",
    "a truncated SQLite header": b"SQLite format 3\x00" + b"\x00" * 10,
}


@pytest.mark.parametrize("name", list(NOT_A_DATABASE))
def test_a_store_that_cannot_be_used_is_one_line_and_nothing_serves(tmp_path: Path, name: str) -> None:
    database = tmp_path / "chat.db"
    database.write_bytes(NOT_A_DATABASE[name])
    options = ["--agent", f"script:{SCRIPT}", "--domain", DOMAIN, "--store", f"sqlite:{database}"]
    done = subprocess.run(
        [*COMMAND, *options, "--port", str(free_port())], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("dial-runtime serve: SQLite store ") and "not a SQLite database" in done.stderr


def test_a_store_in_a_folder_that_does_not_exist_is_refused_at_start(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'no' / 'such' / 'chat.db'}"
    options = ["--agent", f"script:{SCRIPT}", "--domain", DOMAIN, "--store", store]
    done = subprocess.run([*COMMAND, *options], capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stderr.count("\n")) == (1, 1)
    assert "does not exist" in done.stderr


# --- Ctrl-C -----------------------------------------------------------------------------------------------------

#: How long ``serve`` may take to exit after Ctrl-C, with a page's stream held open.
STOP_WITHIN = 2.0


@contextlib.contextmanager
def serving_in_a_terminal(
    *options: str, output: Path, workers: int = 1, cwd: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``dial-runtime serve`` in a session of its own, as a terminal runs it (Ctrl-C signals the whole process
    group, workers included), in ``cwd``, writing to ``output``; its base URL and the process, once it answers
    and each of its ``workers`` has started."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with output.open("wb") as written:
        process = subprocess.Popen(
            [*COMMAND, *options, "--port", str(port), "--workers", str(workers)],
            stdout=written,
            stderr=written,
            start_new_session=True,
            cwd=cwd,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/conversations", timeout=1)
                if output.read_text().count("Started server process") >= workers:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, output.read_text()
            time.sleep(0.05)
        yield url, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def ctrl_c(process: subprocess.Popen[bytes]) -> float:
    """Press Ctrl-C at the terminal ``process`` runs in; the seconds it took to exit (at most ``STOP_WITHIN``)."""
    pressed = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=STOP_WITHIN + 10)
    return time.monotonic() - pressed


def stream_opened(client: httpx.Client, method: str, url: str, until: str, **options: Any) -> httpx.Response:
    """A server-sent event stream, held open once ``until`` arrived on it."""
    response = client.send(client.build_request(method, url, **options), stream=True)
    assert response.status_code == 200
    arrived = ""
    for chunk in response.iter_text():
        arrived += chunk
        if until in arrived:
            return response
    raise AssertionError(f"the stream ended before {until!r}: {arrived}")


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_with_a_page_listening_for_changes_stops_at_once(tmp_path: Path, workers: int) -> None:
    options = ["--agent", f"script:{SCRIPT}", "--domain", DOMAIN, "--store", f"sqlite:{tmp_path / 'c.db'}"]
    output = tmp_path / "serve.log"
    with (
        serving_in_a_terminal(*options, output=output, workers=workers) as (url, process),
        httpx.Client(timeout=10) as client,
    ):
        listening = stream_opened(client, "GET", f"{url}/conversations/k/changes", until="event: changed")
        took = ctrl_c(process)
        listening.close()
    assert took < STOP_WITHIN
    assert process.returncode == 0
    assert_no_traceback(output)


def test_ctrl_c_while_a_reply_streams_stops_at_once(tmp_path: Path) -> None:
    """An AG-UI run's stream is open, the model holding the rest of its reply: Ctrl-C does not wait for it."""
    with OpenAIServer() as model:
        story = envelope("<dial-inform>Once upon a time there was a keeper of a lighthouse.</dial-inform>")
        model.add(Reply(story, chunks=8, hold_after=5))
        options = ["--agent", f"{model.base_url}#m", "--domain", DOMAIN, "--store", f"sqlite:{tmp_path / 'c.db'}"]
        output = tmp_path / "serve.log"
        with (
            serving_in_a_terminal(*options, output=output) as (url, process),
            httpx.Client(timeout=10) as client,
        ):
            body = run_input("s", words="a story")
            running = stream_opened(client, "POST", f"{url}/agui", until="TEXT_MESSAGE_CONTENT", json=body)
            took = ctrl_c(process)
            running.close()
    assert took < STOP_WITHIN
    assert process.returncode == 0
    assert_no_traceback(output)


def assert_no_traceback(output: Path) -> None:
    written = output.read_text()
    assert "Traceback" not in written and "CancelledError" not in written, written
