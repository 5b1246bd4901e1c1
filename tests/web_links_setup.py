"""What the decision link tests share: a served app with links, a conversation with a card waiting, its links."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette

from dial_runtime import LogEntry
from dial_runtime.decisions.links import Keyring, MemoryUsedTokens, generate_key
from dial_runtime.web import create_app, scripted_agents

from .fakes import envelope, suggest
from .web_domains import WebNotes
from .web_server import decode, interrupts, run_input, stored_log

ADD = envelope(suggest("add-note", '{"text":"buy milk"}'), prose="Here is the note.")
REMOVE = envelope(suggest("remove-note", '{"text":"old"}'))
ACK = '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>'

#: Who may use the app: ``X-User`` names the caller (default ada); ``nobody`` is refused.
ROLES = {"rita": {"reviewers"}, "rex": {"reviewers"}, "ada": {"staff"}}

_COUNT = itertools.count()


def principal(request: Any) -> str | None:
    user = str(request.headers.get("x-user", "ada"))
    return None if user == "nobody" else user


def roles_of(principal: str) -> set[str]:
    return ROLES.get(principal, set())


def links_app(
    store: Path, scripts: dict[str, list[str]], keyring: Keyring, used: MemoryUsedTokens | None, **options: Any
) -> Starlette:
    """The web surface with decision links, on the notes domain (or ``domain=``): ``viewer`` may see but decide
    nothing; ``used=None`` keeps the used tokens where the app does by default (the store's database)."""
    settings: dict[str, Any] = {
        "auth": principal,
        "roles": roles_of,
        "can_decide": lambda who, subject: who != "viewer",
        "links": keyring,
        "used_tokens": used,
        "deadlines": None,
    }
    settings.update(options)
    domain = settings.pop("domain", None) or WebNotes()
    return create_app(store=f"sqlite:{store}", domain=domain, agent=scripted_agents(scripts), **settings)


def new_keyring() -> Keyring:
    return Keyring([generate_key("HS256", key_id="web-links")])


def start(client: httpx.Client, scripts: dict[str, list[str]], *replies: str, words: str = "add milk") -> str:
    """A new conversation whose agent replies with ``replies``, its first words said: its id."""
    thread = f"l{next(_COUNT)}"
    scripts[thread] = list(replies)
    response = client.post("/agui", json=run_input(thread, words=words))
    assert response.status_code == 200, response.text
    return thread


def waiting(client: httpx.Client, thread: str, **headers: str) -> list[dict[str, Any]]:
    """The interrupts waiting in ``thread`` (a snapshot)."""
    response = client.post("/agui", json=run_input(thread), headers=headers)
    assert response.status_code == 200, response.text

    return interrupts(decode(response.text))


def digest_of(client: httpx.Client, thread: str, suggestion: str = "sg-1") -> str:
    """The digest of the payload that waits on ``suggestion``."""
    for interrupt in waiting(client, thread):
        if interrupt.get("toolCallId") == suggestion:
            return str(interrupt["metadata"]["digest"])
    raise AssertionError(f"{suggestion} does not wait in {thread}")


def issue(
    keyring: Keyring,
    thread: str,
    digest: str,
    *,
    suggestion: str = "sg-1",
    decider: str | None = "ada",
    roles: Iterable[str] = (),
    decisions: Sequence[str] = ("accept", "dismiss"),
    **extra: Any,
) -> str:
    return keyring.issue(
        conversation_id=thread,
        suggestion_id=suggestion,
        digest=digest,
        decider=decider,
        roles=roles,
        decisions=decisions,
        **extra,
    )


def events(store: Path, thread: str, kind: str) -> list[Any]:
    """The events of ``kind`` in the stored log of ``thread``, read on a thread of its own (a browser test's
    Playwright holds this one's event loop)."""
    log: list[LogEntry] = []
    reader = threading.Thread(target=lambda: log.extend(stored_log(store, thread)))
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading the store took over 10 s"
    return [entry.event for entry in log if entry.event.type == kind]
