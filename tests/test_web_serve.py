"""``dial-runtime serve``: the command starts uvicorn on the web surface; bad settings are one line and exit 2."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .fakes import envelope, suggest
from .web_server import decode, run_input

COMMAND = [sys.executable, "-m", "dial_runtime.cli", "serve"]
DOMAIN = "dial_runtime.demo:NotesDomain"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serve(*options: str) -> Iterator[str]:
    """``dial-runtime serve`` with ``options`` on a free port; its base URL once it answers (10 s at most)."""
    port = free_port()
    process = subprocess.Popen(
        [*COMMAND, *options, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(f"{url}/conversations", timeout=1).raise_for_status()
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = process.stdout.read() if process.stdout else ""
                    raise AssertionError(f"serve did not start: {output}") from None
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout:
            process.stdout.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_runs_a_scripted_conversation_on_sqlite(tmp_path: Path, workers: int) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([envelope(suggest("add-note", '{"text":"milk"}')), "<dial/>"]))
    options = ["--agent", f"script:{script}", "--domain", DOMAIN, "--store", f"sqlite:{tmp_path / 'c.db'}"]
    with serve(*options, "--workers", str(workers)) as url:
        events = decode(httpx.post(f"{url}/agui", json=run_input("one", words="add milk"), timeout=10).text)
        (interrupt,) = events[-1]["outcome"]["interrupts"]
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
        events = decode(httpx.post(f"{url}/agui", json=run_input("one", resume=resume), timeout=10).text)
        assert [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["sg-1"]
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "dial-chat" in page.text
        assert httpx.get(f"{url}/conversations", timeout=10).json() == {"conversations": ["one"]}


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
