"""``import dial_runtime`` loads no HTTP or terminal library: each is imported by what uses it, on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Libraries only some users need, and the exports that bring each in.
HEAVY = ["httpx", "rich", "prompt_toolkit", "psycopg"]


def loaded_after(code: str) -> set[str]:
    """Which of :data:`HEAVY` a fresh interpreter has imported after running ``code``."""
    probe = f"import sys, json\n{code}\nprint(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize(
    "code", ["import dial_runtime", "import dial_runtime.agents, dial_runtime.stores, dial_runtime.driver.replay"]
)
def test_importing_the_library_loads_no_http_or_terminal_library(code: str) -> None:
    assert loaded_after(code) == set()


@pytest.mark.parametrize(
    ("code", "loaded"),
    [
        ("dial_runtime.ChatAgent", {"httpx"}),
        ("dial_runtime.agent_from_uri", {"httpx"}),
        ("dial_runtime.agents.history_from_log", {"httpx"}),
        ("dial_runtime.stores.PostgresStore", {"psycopg"}),
    ],
)
def test_an_export_that_needs_a_library_loads_it_on_first_use(code: str, loaded: set[str]) -> None:
    # httpx loads its command line's rich itself when click is installed: what the library alone brings in.
    brought = set().union(*(loaded_after(f"import {name}") for name in loaded))
    assert loaded_after(f"import dial_runtime, dial_runtime.agents, dial_runtime.stores\n{code}") == brought
