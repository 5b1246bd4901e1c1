"""A card of ``dial-runtime mcp``, waiting for an MCP call the ``mcp`` SDK's client makes, decided on the surfaces
every conversation has: a decision link sent by webhook to a real receiver and used against the web surface, and
the panel in headless Chromium. The call gets the outcome; the action runs once, in the process that decided."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from playwright.sync_api import BrowserContext, expect

from dial_runtime.decisions.links import MemoryUsedTokens, token_from_url
from dial_runtime.stores import open_store
from dial_runtime.views.person import Card, project
from dial_runtime.web import create_app
from dial_runtime.web.serve import agent_factory

from ..browser import open_thread
from ..terminal.test_terminal import Terminal
from ..web.test_web_links_notify import Receiver
from ..web_links_setup import new_keyring
from ..web_server import free_port, serving
from .ledger import Ledger

ROOT = Path(__file__).parents[2]
CLI = str(Path(sys.executable).parent / "dial-runtime")
KEYRING = new_keyring()


def in_thread(work: Callable[[], Any], within: float = 60) -> Any:
    """``anyio.run(work)`` on a thread of its own (Playwright's sync API holds this thread's event loop)."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(anyio.run(work))
        except BaseException as error:  # handed to the test's thread
            failed.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=within)
    assert not worker.is_alive(), f"it took over {within} s"
    if failed:
        raise failed[0]
    return done[0]


class Call:
    """One MCP call to ``dial-runtime mcp`` (over stdio, the SDK's client) made on a thread of its own."""

    def __init__(self, env: dict[str, str], store: str, arguments: dict[str, Any], *options: str) -> None:
        self._result: list[Any] = []
        self._failed: list[BaseException] = []
        command = ["mcp", "--domain", "tests.doors.ledger:Ledger", "--store", store, "--wait", "60", *options]
        parameters = StdioServerParameters(command=CLI, args=command, env=env, cwd=ROOT)

        async def call() -> None:
            with open(os.devnull, "w") as quiet:
                async with Client(stdio_client(parameters, errlog=quiet)) as client:
                    self._result.append(await client.call_tool("append-line", arguments))

        def run() -> None:
            try:
                anyio.run(call)
            except BaseException as error:
                self._failed.append(error)

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def result(self, within: float = 60) -> Any:
        self._thread.join(timeout=within)
        assert not self._thread.is_alive(), f"the call did not end within {within} s"
        if self._failed:
            raise self._failed[0]
        return self._result[0]


def waiting_card(store: str) -> tuple[str, str]:
    """The conversation and the suggestion of the card that waits in ``store``, once one does."""

    async def look() -> tuple[str, str]:
        with anyio.fail_after(30):
            while True:
                opened = open_store(store)
                try:
                    for conversation in await opened.conversations():
                        for item in project(await opened.read(conversation)).items:
                            if isinstance(item, Card) and item.waiting:
                                return conversation, item.id
                finally:
                    await opened.aclose()
                await anyio.sleep(0.05)

    return in_thread(look)  # type: ignore[no-any-return]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    made = Receiver()
    with serving(made.app()) as url:
        yield made, url


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def served(tmp_path: Path, ledger: Path) -> Iterator[tuple[str, str]]:
    """The web surface (panel, links) over the door's store, its agent the one outside: its URL and the store's."""
    store = f"sqlite:{tmp_path / 'approvals.db'}"
    port = free_port()
    domain = Ledger(ledger)
    app = create_app(
        store=store,
        domain=domain,
        agent=agent_factory("outside:", domain),
        links=KEYRING,
        used_tokens=MemoryUsedTokens(),
        public_url=f"http://127.0.0.1:{port}",
        auth=lambda request: "ada",
        deadlines=None,
    )
    with serving(app, port) as url:
        yield url, store


def lines(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []


def test_a_door_card_is_told_with_links_and_a_link_decides_it(
    served: tuple[str, str], ledger: Path, receiver: tuple[Receiver, str], tmp_path: Path
) -> None:
    url, store = served
    hooks, hook_url = receiver
    keys = tmp_path / "keys.json"
    keys.write_text(KEYRING.to_json(), encoding="utf-8")
    env = {
        **os.environ,
        "DIAL_TEST_LEDGER": str(ledger),
        "DIAL_TEST_HOOK": f"{hook_url}/hook",
        "DIAL_TEST_KEYS": str(keys),
        "DIAL_TEST_PUBLIC": url,
    }
    call = Call(env, store, {"text": "milk"}, "--announce", "tests.doors.door_announcer:announcer")
    conversation, suggestion = waiting_card(store)
    (told,) = hooks.wait(conversation, 1)
    assert (told.kind, told.recipients, told.suggestion_id) == ("waiting", ("ada",), suggestion)
    assert told.preview == "Append the line 'milk'"
    with httpx.Client(base_url=url, timeout=10.0) as client:
        used = client.post("/decide", json={"token": token_from_url(told.links["accept"]), "decision": "accept"})
    assert used.status_code == 200, used.text
    result = call.result()
    assert not result.is_error and result.structured_content == {"lines": 1}
    assert lines(ledger) == ["milk"]


def test_a_door_card_is_decided_in_the_panel(
    context: BrowserContext, served: tuple[str, str], ledger: Path
) -> None:
    url, store = served
    call = Call({**os.environ, "DIAL_TEST_LEDGER": str(ledger)}, store, {"text": "eggs"})
    conversation, suggestion = waiting_card(store)
    page = open_thread(context, url, conversation)
    card = page.locator(f'.dial-card[data-suggestion="{suggestion}"]')
    expect(card.locator(".dial-preview")).to_have_text("Append the line 'eggs'")
    expect(page.locator(".dial-user").first).to_contain_text("calls append-line")
    card.locator(".dial-accept").click()
    expect(card).to_have_attribute("data-status", "done")
    result = call.result()
    assert not result.is_error and result.structured_content == {"lines": 1}
    assert lines(ledger) == ["eggs"]
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_door_card_is_decided_at_the_terminal(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dial-runtime chat --agent outside: --id CONVERSATION`` takes up the door's conversation: the card that
    waits is put to the person first, and their accept ends the MCP call's wait with the outcome."""
    store = f"sqlite:{tmp_path / 'approvals.db'}"
    monkeypatch.setenv("DIAL_TEST_LEDGER", str(ledger))
    call = Call(dict(os.environ), store, {"text": "tea"})
    conversation, suggestion = waiting_card(store)
    term = Terminal(
        "chat",
        "--agent",
        "outside:",
        "--domain",
        "tests.doors.ledger:Ledger",
        "--store",
        store,
        "--id",
        conversation,
    )
    term.expect(f"{suggestion} · append-line", "Append the line 'tea'")
    term.type("a", after=f"{suggestion} ›")
    term.expect("✓ done: Append the line 'tea'")
    term.press("\x04", after="you:")  # Ctrl-D: the person leaves
    term.finish()
    result = call.result()
    assert not result.is_error and result.structured_content == {"lines": 1}
    assert lines(ledger) == ["tea"]
