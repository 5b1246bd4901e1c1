"""A door's card decided on the surfaces every conversation has: a decision link sent by webhook to a real
receiver and used against the web surface, and the panel in headless Chromium; the gate, on the same store,
hands back the outcome, and the action runs once, in the process that decided."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from dial_runtime.decisions.announce import Announcer
from dial_runtime.decisions.links import MemoryUsedTokens, token_from_url
from dial_runtime.decisions.notify import Notifications, WebhookNotifier
from dial_runtime.doors.gate import Ended, Gate, Waits
from dial_runtime.stores import open_store
from dial_runtime.web import create_app
from dial_runtime.web.serve import agent_factory

from ..browser import open_thread
from ..web.test_web_links_notify import Receiver
from ..web_links_setup import new_keyring
from ..web_server import free_port, serving
from .ledger import Ledger

T = TypeVar("T")
KEYRING = new_keyring()


def in_thread(work: Callable[[], Any]) -> Any:
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
    worker.join(timeout=60)
    assert not worker.is_alive(), "the gate took over 60 s"
    if failed:
        raise failed[0]
    return done[0]


class Door:
    """A gate on ``store``, each call on a store object of its own (as the MCP server's process would)."""

    def __init__(self, store: str, ledger: Path, announcer: Announcer | None = None) -> None:
        self.store = store
        self.ledger = ledger
        self.announcer = announcer

    def run(self, work: Callable[[Gate], Any]) -> Any:
        async def go() -> Any:
            store = open_store(self.store)
            try:
                return await work(Gate(Ledger(self.ledger), store, prefix="mcp", announcer=self.announcer))
            finally:
                await store.aclose()

        return in_thread(go)

    def propose(self, text: str) -> Waits:
        waits = self.run(lambda gate: gate.propose("append-line", {"text": text}, by="mcp:test"))
        assert isinstance(waits, Waits)
        return waits  # type: ignore[no-any-return]

    def settle(self, waits: Waits) -> Ended:
        ended = self.run(lambda gate: gate.settle(waits, by="mcp:test", within=30))
        assert isinstance(ended, Ended)
        return ended  # type: ignore[no-any-return]


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
    public = f"http://127.0.0.1:{port}"
    domain = Ledger(ledger)
    app = create_app(
        store=store,
        domain=domain,
        agent=agent_factory("outside:", domain),
        links=KEYRING,
        used_tokens=MemoryUsedTokens(),
        public_url=public,
        auth=lambda request: "ada",
        deadlines=None,
    )
    with serving(app, port) as url:
        yield url, store


def lines(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []


def test_a_door_card_is_told_with_links_and_a_link_decides_it(
    served: tuple[str, str], ledger: Path, receiver: tuple[Receiver, str]
) -> None:
    url, store = served
    hooks, hook_url = receiver
    notifications = Notifications(
        [WebhookNotifier(f"{hook_url}/hook", shape="json")], attempts=2, backoff=0.01, max_backoff=0.02
    )
    announcer = Announcer(notifications, recipients=lambda thread, card: ["ada"], links=KEYRING, public_url=url)
    door = Door(store, ledger, announcer)
    waits = door.propose("milk")
    (told,) = hooks.wait(waits.conversation_id, 1)
    assert (told.kind, told.recipients, told.suggestion_id) == ("waiting", ("ada",), waits.card.id)
    assert told.preview == "Append the line 'milk'"
    with httpx.Client(base_url=url, timeout=10.0) as client:
        used = client.post("/decide", json={"token": token_from_url(told.links["accept"]), "decision": "accept"})
    assert used.status_code == 200, used.text
    ended = door.settle(waits)
    assert ended.card.reported is not None and ended.card.reported.status == "done"
    assert (ended.card.decided_by, ended.card.decided_via) == ("ada", "link")
    assert lines(ledger) == ["milk"]


def test_a_door_card_is_decided_in_the_panel(
    context: BrowserContext, served: tuple[str, str], ledger: Path
) -> None:
    url, store = served
    door = Door(store, ledger)
    waits = door.propose("eggs")
    page = open_thread(context, url, waits.conversation_id)
    card = page.locator(f'.dial-card[data-suggestion="{waits.card.id}"]')
    expect(card.locator(".dial-preview")).to_have_text("Append the line 'eggs'")
    expect(page.locator(".dial-user").first).to_contain_text("calls append-line")
    card.locator(".dial-accept").click()
    expect(card).to_have_attribute("data-status", "done")
    ended = door.settle(waits)
    assert ended.card.reported is not None and ended.card.reported.status == "done"
    assert ended.card.decided_via == "web"
    assert lines(ledger) == ["eggs"]
    assert page.errors == []  # type: ignore[attr-defined]
