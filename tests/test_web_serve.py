"""``dial-runtime serve``: the command starts uvicorn on the web surface; bad settings are one line and exit 2."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .fakes import envelope, suggest
from .web_server import decode, free_port, run_input, server_process

COMMAND = [sys.executable, "-m", "dial_runtime.cli", "serve"]
DOMAIN = "dial_runtime.demo:NotesDomain"


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


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--agent", "script:/no/such.json", "--domain", DOMAIN, "--store", "memory:"], "cannot read"),
        (["--agent", "script:/dev/null", "--domain", "nope", "--store", "memory:"], "expected module:factory"),
        (["--agent", "openai:x", "--domain", "no_such_module:X", "--store", "memory:"], "cannot import"),
        (["--agent", "weird", "--domain", DOMAIN, "--store", "memory:"], "is not one of"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "ftp://x"], "store URL"),
        (["--agent", "ollama:m", "--domain", DOMAIN, "--store", "memory:", "--workers", "0"], "--workers"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(options: list[str], message: str) -> None:
    done = subprocess.run([*COMMAND, *options], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("dial-runtime serve: ")
    assert message in done.stderr
