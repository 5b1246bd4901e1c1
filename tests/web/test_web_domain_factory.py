"""A domain factory on the web surface: each conversation of one server runs the domain its own log builds (the
demo's notebook, ``NotesDomain.from_log``), and a server restarted on the same store rebuilds the same one. A real
uvicorn server, and a real ``dial-runtime serve``."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from dial_runtime import LogEntry, open_store, system_prompt
from dial_runtime.demo import NotesDomain, notes_in
from dial_runtime.domains.loading import load_domain
from dial_runtime.web import create_app, scripted_agents

from ..fakes import envelope, suggest
from ..web_server import accept, decode, finished, free_port, interrupts, run_input, server_process, serving

LIST = envelope(suggest("list-notes", "{}"))
DONE = "<dial/>"


def adding_then_listing(text: str) -> list[str]:
    """A conversation's script: add ``text``, list the notes, and list them again in a later run."""
    return [envelope(suggest("add-note", json.dumps({"text": text}))), LIST, DONE, LIST, DONE]


SCRIPTS = {"ada": adding_then_listing("buy milk"), "grace": adding_then_listing("call the dentist")}


def listed(events: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The notes each ``list-notes`` of a run found."""
    results = [json.loads(event["content"]) for event in events if event["type"] == "TOOL_CALL_RESULT"]
    return [each["result"]["notes"] for each in results if each["action"] == "list-notes"]


def post(client: httpx.Client, thread: str, **body: Any) -> list[dict[str, Any]]:
    response = client.post("/agui", json=run_input(thread, **body))
    assert response.status_code == 200, response.text
    return decode(response.text)


def add_then_list(client: httpx.Client, thread: str) -> list[list[str]]:
    """Ask the conversation for its note and accept it: what the listing after it found."""
    (card,) = interrupts(post(client, thread, words="add my note"))
    return listed(post(client, thread, resume=[accept(card)]))


def list_again(client: httpx.Client, thread: str) -> list[list[str]]:
    events = post(client, thread, words="what is in my notebook?")
    assert finished(events)["outcome"]["type"] == "success"
    return listed(events)


@contextlib.contextmanager
def notes_server(store: str, scripts: Mapping[str, list[str]]) -> Iterator[httpx.Client]:
    """A uvicorn server giving each conversation its notebook, and a client for it."""
    app = create_app(store=store, domain=NotesDomain.from_log, agent=scripted_agents(scripts))
    with serving(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client


async def stored(url: str, thread: str) -> list[LogEntry]:
    store = open_store(url)
    try:
        return list(await store.read(thread))
    finally:
        await store.aclose()


def test_each_conversation_keeps_its_own_notes_and_a_restart_rebuilds_them_from_its_log(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'notes.db'}"
    with notes_server(url, SCRIPTS) as client:
        assert add_then_list(client, "ada") == [["buy milk"]]
        assert add_then_list(client, "grace") == [["call the dentist"]]  # not ada's milk
        assert list_again(client, "ada") == [["buy milk"]]
    with notes_server(url, SCRIPTS) as client:  # a new server: nothing but the store is left
        assert list_again(client, "grace") == [["call the dentist"]]
    assert notes_in(anyio.run(stored, url, "ada")) == ["buy milk"]
    assert notes_in(anyio.run(stored, url, "grace")) == ["call the dentist"]


def test_a_domain_factory_describes_its_actions_and_snapshots_build_no_domain() -> None:
    built: list[str] = []

    def notebooks(conversation_id: str, log: Sequence[LogEntry]) -> NotesDomain:
        built.append(conversation_id)
        return NotesDomain.from_log(conversation_id, log)

    app = create_app(store="memory:", domain=notebooks, agent=scripted_agents(SCRIPTS))
    with serving(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        names = [each["name"] for each in client.get("/actions").json()["actions"]]
        assert names == ["add-note", "remove-note", "list-notes", "share-note"]
        assert finished(post(client, "ada"))["outcome"]["type"] == "success"  # a snapshot asks the domain nothing
        assert built == [""]  # the describing domain, built once by create_app
        add_then_list(client, "ada")
        assert built == ["", "ada", "ada"]  # one per run that asked it something


def test_create_app_refuses_a_domain_that_is_neither_a_domain_nor_a_factory() -> None:
    with pytest.raises(TypeError, match="a domain factory"):
        create_app(store="memory:", domain=["add-note"], agent=scripted_agents([]))


def test_serve_gives_each_conversation_its_notes_and_a_restart_rebuilds_them(tmp_path: Path) -> None:
    """``dial-runtime serve --domain dial_runtime.demo:notes_by_conversation``, stopped and started again on the
    same SQLite store."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(adding_then_listing("buy milk")))  # every conversation's
    options = [
        "--agent",
        f"script:{script}",
        "--domain",
        "dial_runtime.demo:notes_by_conversation",
        "--store",
        f"sqlite:{tmp_path / 'notes.db'}",
    ]

    @contextlib.contextmanager
    def dial_runtime_serve() -> Iterator[httpx.Client]:
        port = free_port()
        command = [sys.executable, "-m", "dial_runtime.cli", "serve", *options, "--port", str(port)]
        with (
            server_process(command, f"http://127.0.0.1:{port}/conversations"),
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client,
        ):
            yield client

    with dial_runtime_serve() as client:
        assert add_then_list(client, "ada") == [["buy milk"]]
        assert add_then_list(client, "grace") == [["buy milk"]]  # grace's milk alone, not ada's too
    with dial_runtime_serve() as client:
        assert list_again(client, "ada") == [["buy milk"]]


def test_a_loaded_domain_factory_is_described_by_a_new_conversations_domain() -> None:
    """What ``serve`` writes the system prompt from, and checks before it starts."""
    loaded = load_domain("dial_runtime.demo:notes_by_conversation")
    assert not hasattr(loaded, "run")
    assert system_prompt(loaded) == system_prompt(NotesDomain())
    assert loaded("ada", []).notes == []


def test_a_domain_factory_that_builds_no_domain_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "notebooks.py").write_text("def broken():\n    return lambda conversation_id, log: None\n")
    command = [sys.executable, "-m", "dial_runtime.cli", "serve", "--agent", "script:/dev/null"]
    done = subprocess.run(
        [*command, "--domain", "notebooks:broken", "--store", "memory:"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "dial-runtime serve: --domain 'notebooks:broken': the domain factory broken() returned built None, "
        "not a domain (no run method)\n"
    )
