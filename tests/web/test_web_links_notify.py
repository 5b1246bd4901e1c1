"""Notifications from the web surface, delivered as webhooks to a real HTTP receiver (a Starlette app under
uvicorn): a run that leaves a card waiting tells each recipient, with links only they can use; a decision,
through the panel, a link or a deadline the server fires, is told too; and a notifier or ``recipients`` that
fails never changes a run. Real servers, real clocks, every wait bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import msgspec
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dial_runtime import ActionSpec
from dial_runtime.decisions.links import MemoryUsedTokens, token_from_url
from dial_runtime.decisions.notify import Notification, Notifications, WebhookNotifier
from dial_runtime.web import create_app, scripted_agents

from ..web_domains import WebNotes
from ..web_links_setup import ACK, ADD, events, links_app, new_keyring, principal, start, waiting
from ..web_server import accept, free_port, run_input, serving

#: The longest a test waits for a notification to arrive.
BOUND = 10.0


class Receiver:
    """The notifications POSTed to ``/hook``, as they arrive; ``/broken`` answers 500."""

    def __init__(self) -> None:
        self.received: list[Notification] = []
        self.keys: list[str] = []
        self._lock = threading.Lock()

    async def hook(self, request: Request) -> Response:
        notification = msgspec.json.decode(await request.body(), type=Notification)
        with self._lock:
            self.received.append(notification)
            self.keys.append(request.headers["idempotency-key"])
        return Response(status_code=204)

    async def broken(self, request: Request) -> Response:
        return Response("down", status_code=500)

    def app(self) -> Starlette:
        return Starlette(
            routes=[Route("/hook", self.hook, methods=["POST"]), Route("/broken", self.broken, methods=["POST"])]
        )

    def about(self, thread: str) -> list[Notification]:
        with self._lock:
            return [each for each in self.received if each.conversation_id == thread]

    def wait(self, thread: str, count: int) -> list[Notification]:
        """The first ``count`` notifications about ``thread``, once they have come (``BOUND`` seconds at most)."""
        deadline = time.monotonic() + BOUND
        while len(self.about(thread)) < count:
            assert time.monotonic() < deadline, (
                f"{count} notifications of {thread} never came: {self.about(thread)}"
            )
            time.sleep(0.02)
        return self.about(thread)[:count]


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[Receiver, str]]:
    made = Receiver()
    with serving(made.app()) as url:
        yield made, url


def quick(url: str) -> Notifications:
    return Notifications([WebhookNotifier(url, shape="json")], attempts=2, backoff=0.01, max_backoff=0.02)


SCRIPTS: dict[str, list[str]] = {}
KEYRING = new_keyring()
PORT = free_port()
PUBLIC = f"http://127.0.0.1:{PORT}"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("notify") / "conversations.db"


@pytest.fixture(scope="module")
def base_url(store_path: Path, receiver: tuple[Receiver, str]) -> Iterator[str]:
    app = links_app(
        store_path,
        SCRIPTS,
        KEYRING,
        MemoryUsedTokens(),
        public_url=PUBLIC,
        notifications=quick(f"{receiver[1]}/hook"),
        recipients=lambda thread, card: ["ada", "bob"],
    )
    with serving(app, PORT) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10.0) as http:
        yield http


def test_a_card_waiting_tells_each_recipient_with_links_only_they_can_use(
    client: httpx.Client, receiver: tuple[Receiver, str], store_path: Path
) -> None:
    hooks, _ = receiver
    thread = start(client, SCRIPTS, ADD, ACK)
    told = hooks.wait(thread, 2)
    assert sorted((each.kind, each.recipients) for each in told) == [("waiting", ("ada",)), ("waiting", ("bob",))]
    assert len({each.id for each in told}) == 2  # each recipient's notification is its own
    ada = next(each for each in told if each.recipients == ("ada",))
    bob = next(each for each in told if each.recipients == ("bob",))
    assert ada.preview == "Add the note 'buy milk'" and ada.suggestion_id == "sg-1"
    assert list(ada.links) == ["accept", "dismiss", "open"]
    assert all(url.startswith(f"{PUBLIC}/decide?token=") for url in ada.links.values())
    assert KEYRING.authenticate(token_from_url(ada.links["open"])).decisions == {"accept", "dismiss", "edit"}

    stolen = client.post(
        "/decide",
        json={"token": token_from_url(bob.links["accept"]), "decision": "accept"},
        headers={"x-user": "ada"},
    )
    assert stolen.json()["reason"] == "wrong-person"
    page = client.get(ada.links["accept"].removeprefix(PUBLIC))
    assert page.status_code == 200
    used = client.post("/decide", json={"token": token_from_url(ada.links["accept"]), "decision": "accept"})
    assert used.status_code == 200, used.text
    decided = hooks.wait(thread, 3)[2]
    assert (decided.kind, decided.decision, decided.decided_by, decided.decided_via) == (
        "decided",
        "accept",
        "ada",
        "link",
    )
    assert decided.recipients == ("ada", "bob") and decided.links == {} and decided.outcome == "Done"
    assert len(hooks.about(thread)) == 3  # nothing else: ACK proposes no card
    assert sorted(hooks.keys) == sorted({*hooks.keys})  # every notification once, under its own id


def test_a_decision_in_the_panel_and_a_refused_edit_are_told(
    client: httpx.Client, receiver: tuple[Receiver, str]
) -> None:
    hooks, _ = receiver
    thread = start(client, SCRIPTS, ADD, ACK)
    hooks.wait(thread, 2)
    [shown] = waiting(client, thread)
    edit = {"approved": True, "editedArgs": {"text": ""}, "digest": shown["metadata"]["digest"]}
    resume = [{"interruptId": shown["id"], "status": "resolved", "payload": edit}]
    client.post("/agui", json=run_input(thread, resume=resume))
    again = sorted(hooks.wait(thread, 4)[2:], key=lambda each: each.recipients)
    assert [(each.kind, each.recipients, each.payload) for each in again] == [
        ("waiting", ("ada",), {"text": ""}),
        ("waiting", ("bob",), {"text": ""}),
    ]
    assert list(again[0].links) == ["dismiss", "open"]  # a refused payload is not offered as it is
    [refused] = waiting(client, thread)
    client.post(
        "/agui",
        json=run_input(
            thread,
            resume=[
                {
                    "interruptId": refused["id"],
                    "status": "resolved",
                    "payload": {"approved": False, "digest": refused["metadata"]["digest"]},
                }
            ],
        ),
        headers={"x-user": "bob"},
    )
    decided = hooks.wait(thread, 5)[4]
    assert (decided.kind, decided.decision, decided.decided_by, decided.decided_via) == (
        "decided",
        "dismiss",
        "bob",
        "web",
    )


def test_a_notifier_or_recipients_that_fail_never_change_a_run(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    scripts: dict[str, list[str]] = {}

    def failing(thread: str, card: Any) -> list[str]:
        raise RuntimeError("the directory is down")

    broken = Notifications([WebhookNotifier(f"{url}/broken", shape="json")], attempts=2, backoff=0.01)
    for notifications, recipients in ((broken, None), (quick(f"{url}/hook"), failing)):
        app = create_app(
            store=f"sqlite:{tmp_path / 'failing.db'}",
            domain=WebNotes(),
            agent=scripted_agents(scripts),
            auth=principal,
            deadlines=None,
            notifications=notifications,
            recipients=recipients,
        )
        with serving(app) as served, httpx.Client(base_url=served, timeout=10.0) as http:
            thread = start(http, scripts, ADD, ACK)
            [shown] = waiting(http, thread)
            done = http.post("/agui", json=run_input(thread, resume=[accept(shown)]))
            assert '"RUN_FINISHED"' in done.text and "RUN_ERROR" not in done.text
            assert [each.decision for each in events(tmp_path / "failing.db", thread, "decided")] == ["accept"]
        assert hooks.about(thread) == []
    deadline = time.monotonic() + BOUND
    while not broken.undelivered:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert {each.notification_id for each in broken.undelivered} and broken.undelivered[0].attempts == 2


def test_without_recipients_one_notification_goes_with_no_links(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    scripts: dict[str, list[str]] = {}
    app = create_app(
        store=f"sqlite:{tmp_path / 'plain.db'}",
        domain=WebNotes(),
        agent=scripted_agents(scripts),
        deadlines=None,
        links=KEYRING,
        public_url="https://dial.example",
        notifications=quick(f"{url}/hook"),
    )
    with serving(app) as served, httpx.Client(base_url=served, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        [told] = hooks.wait(thread, 1)
        assert (told.kind, told.recipients, told.links) == ("waiting", (), {})


def test_a_deadline_the_server_fires_is_told_as_decided(tmp_path: Path, receiver: tuple[Receiver, str]) -> None:
    hooks, url = receiver
    scripts: dict[str, list[str]] = {}
    app = create_app(
        store=f"sqlite:{tmp_path / 'deadline.db'}",
        domain=WebNotes(),
        agent=scripted_agents(scripts),
        decide_timeout=0.5,
        notifications=quick(f"{url}/hook"),
        recipients=lambda thread, card: ["ada"],
    )
    with serving(app, lifespan="on") as served, httpx.Client(base_url=served, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        waited, expired = hooks.wait(thread, 2)
    assert waited.kind == "waiting"
    assert (expired.kind, expired.decision, expired.recipients, expired.status) == (
        "decided",
        "expire",
        ("ada",),
        "dismissed",
    )


class EscalatingNotes(WebNotes):
    """The notebook, whose notes remind their deciders at once and escalate to the leads a moment later."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        **WebNotes.actions,
        "add-note": ActionSpec(
            mutates=True, remind_after=0.3, escalate_after=0.6, escalate_to=frozenset({"leads"})
        ),
    }


def test_reminders_and_escalations_the_server_fires_are_told_with_links(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    hooks, url = receiver
    scripts: dict[str, list[str]] = {}
    keyring = new_keyring()
    app = create_app(
        store=f"sqlite:{tmp_path / 'escalating.db'}",
        domain=EscalatingNotes(),
        agent=scripted_agents(scripts),
        auth=principal,
        links=keyring,
        public_url="http://127.0.0.1",
        notifications=quick(f"{url}/hook"),
        recipients=lambda thread, card: ["lee"] if card.escalated_to else ["ada"],
    )
    with serving(app, lifespan="on") as served, httpx.Client(base_url=served, timeout=10.0) as http:
        thread = start(http, scripts, ADD, ACK)
        waited, reminded, escalated = hooks.wait(thread, 3)
    assert [n.kind for n in (waited, reminded, escalated)] == ["waiting", "reminder", "escalated"]
    assert (reminded.recipients, escalated.recipients) == (("ada",), ("lee",))
    assert "accept" in reminded.links and "accept" in escalated.links
    assert len({waited.id, reminded.id, escalated.id}) == 3


def test_links_for_recipients_without_auth_are_refused_at_start(tmp_path: Path) -> None:
    """Without ``auth`` every caller is ``local``: a link made for anyone else could never be used."""
    with pytest.raises(ValueError, match="need auth") as refused:
        links_app(
            tmp_path / "c.db",
            {},
            KEYRING,
            MemoryUsedTokens(),
            auth=None,
            public_url=PUBLIC,
            notifications=quick("http://127.0.0.1:9/hook"),
            recipients=lambda thread, card: ["rex"],
        )
    assert "\n" not in str(refused.value)
