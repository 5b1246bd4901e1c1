"""HTTP actions with the run's idempotency key, against a real HTTP service that honours ``Idempotency-Key``.

The service (Starlette under uvicorn, its keys and effects in a SQLite file) behaves as the IETF draft says: the
first request with a key runs the effect and keeps the answer; a request repeating the key gets that answer again
(``Idempotent-Replayed: true``), a ``409`` while the first is still being processed, a ``422`` when the key came
with another payload. Every case counts the effects the service ran, which is what exactly once is about.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dial_runtime import ActionError, Conversation, policy_human
from dial_runtime.adapters.http import IDEMPOTENCY_HEADER, HttpDomain, HttpEndpoint
from dial_runtime.runtime.events import ActionStartedEvent, OutcomeEvent
from dial_runtime.stores.jsonl import check_log

from ..driver.test_reconcile import died_running
from ..fakes import Agent, envelope, suggest
from ..web_server import free_port, serving

TO = {"to": "ada@example.org"}
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}},
    "required": ["to"],
    "additionalProperties": False,
}


class Service:
    """The service's state: a SQLite file of keys (with each key's answer) and of effects (one row per email
    sent); ``seen`` is every request's method, path and ``Idempotency-Key``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()
        self.slow = 0.0  # seconds the next answer is held back after the effect (a reply that times out)
        with self._db() as db:
            db.execute("CREATE TABLE keys (key TEXT PRIMARY KEY, body TEXT, status INTEGER, answer TEXT)")
            db.execute("CREATE TABLE effects (n INTEGER PRIMARY KEY, key TEXT, body TEXT)")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None, timeout=10)

    def effects(self) -> list[tuple[str | None, dict[str, Any]]]:
        with self._db() as db:
            return [
                (key, json.loads(body)) for key, body in db.execute("SELECT key, body FROM effects ORDER BY n")
            ]

    def begin(self, key: str) -> None:
        """A first request with ``key`` that is still being processed (what a 409 is for)."""
        with self._db() as db:
            db.execute("INSERT INTO keys (key, body) VALUES (?, ?)", (key, json.dumps(TO)))

    async def send(self, request: Request) -> Response:
        key = request.headers.get(IDEMPOTENCY_HEADER)
        body = await request.body()
        self.seen.append((request.method, request.url.path, key))
        if request.url.path == "/unkeyed" or key is None:  # a service that ignores keys
            return self._run(None, body)
        with self.lock, self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            kept = db.execute("SELECT body, status, answer FROM keys WHERE key = ?", (key,)).fetchone()
            if kept is None:
                db.execute("INSERT INTO keys (key, body) VALUES (?, ?)", (key, body.decode()))
            db.execute("COMMIT")
        if kept is not None:
            first, status, answer = kept
            if json.loads(first) != json.loads(body):
                return JSONResponse({"error": "the key was used with another payload"}, status_code=422)
            if status is None:
                return JSONResponse({"error": "the first request with this key is being processed"}, 409)
            return Response(answer, status, media_type="application/json", headers={"Idempotent-Replayed": "true"})
        response = self._run(key, body)
        with self._db() as db:
            db.execute("UPDATE keys SET status = ?, answer = ? WHERE key = ?", (201, response.body.decode(), key))
        if self.slow:
            delay, self.slow = self.slow, 0.0
            await anyio.sleep(delay)
        return response

    def _run(self, key: str | None, body: bytes) -> Response:
        payload = json.loads(body)
        if payload.get("to", "").endswith("@invalid"):
            return JSONResponse({"error": "no such mailbox"}, status_code=400)
        with self._db() as db:
            n = db.execute("INSERT INTO effects (key, body) VALUES (?, ?)", (key, body.decode())).lastrowid
        return JSONResponse({"sent": n, "to": payload["to"]}, status_code=201)

    async def inbox(self, request: Request) -> Response:
        self.seen.append((request.method, request.url.path, request.headers.get(IDEMPOTENCY_HEADER)))
        sent = [body for _, body in self.effects() if body["to"] == request.query_params.get("to")]
        return JSONResponse({"count": len(sent), "limit": json.loads(request.query_params.get("limit", "null"))})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/emails", self.send, methods=["POST"]),
                Route("/unkeyed", self.send, methods=["POST"]),
                Route("/inbox", self.inbox, methods=["GET"]),
            ]
        )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, str]]:
    made = Service(tmp_path / "service.db")
    with serving(made.app()) as url:
        yield made, url


def domain(url: str, *, keyed: bool = True, **options: Any) -> HttpDomain:
    return HttpDomain(
        url,
        {
            "send-email": HttpEndpoint(method="POST", path="/emails", schema=SCHEMA, description="Send an email."),
            "send-unkeyed": HttpEndpoint(method="POST", path="/unkeyed", schema=SCHEMA),
            "count-inbox": HttpEndpoint(method="GET", path="/inbox"),
        },
        keyed=keyed,
        **options,
    )


def started(conversation: Conversation) -> ActionStartedEvent:
    (event,) = [entry.event for entry in conversation.log if isinstance(entry.event, ActionStartedEvent)]
    return event


def outcome(conversation: Conversation) -> OutcomeEvent:
    (event,) = [entry.event for entry in conversation.log if isinstance(entry.event, OutcomeEvent)]
    return event


def test_a_run_sends_the_key_the_log_recorded(service: tuple[Service, str], real_clocks: str) -> None:
    async def work() -> None:
        served, url = service
        async with domain(url) as http:
            agent = Agent(
                [
                    envelope(suggest("send-email", json.dumps(TO))),
                    envelope("<dial-acknowledge>Sent.</dial-acknowledge>"),
                ]
            )
            conversation = Conversation(agent=agent, domain=http, human=policy_human())
            await conversation.say("mail ada")
        done = outcome(conversation)
        assert (done.status, done.result) == ("done", {"sent": 1, "to": "ada@example.org"})
        key = started(conversation).key
        assert key and served.seen == [("POST", "/emails", key)]
        assert served.effects() == [(key, TO)]
        check_log(list(conversation.log))

    anyio.run(work, backend=real_clocks)


@pytest.mark.parametrize("reached", [True, False], ids=["the request had reached the service", "it had not"])
def test_recovery_after_a_crash_mid_run_reports_the_one_effect(
    service: tuple[Service, str], reached: bool, real_clocks: str
) -> None:
    """The process died inside the run: whether or not its request reached the service, recovery sends it again
    under the same key, the service runs the effect once in all, and the outcome is ``done`` with the answer
    the service gave, ``reconciled``."""

    async def work() -> None:
        served, url = service
        entries = died_running()
        key = next(entry.event.key for entry in entries if isinstance(entry.event, ActionStartedEvent))
        assert key is not None
        async with domain(url) as http:
            if reached:
                first = await http.run("send-email", TO, key=key)  # what the dead process sent, unlogged
            conversation = Conversation(agent=Agent([]), domain=http, human=policy_human(), log=entries)
            await conversation.recover()
        done = outcome(conversation)
        assert (done.status, done.reconciled, done.result) == ("done", True, {"sent": 1, "to": "ada@example.org"})
        if reached:
            assert done.result == first
        assert served.effects() == [(key, TO)]
        assert [seen[2] for seen in served.seen] == [key] * (2 if reached else 1)
        check_log(list(conversation.log))

    anyio.run(work, backend=real_clocks)


def test_a_reply_that_times_out_is_sent_again_with_the_key_and_runs_once(
    service: tuple[Service, str], real_clocks: str
) -> None:
    """The service ran the effect, but its answer came after the client's timeout: the request goes again with
    the same key, and the service answers with what it kept."""

    async def work() -> None:
        served, url = service
        served.slow = 1.5
        async with domain(url, timeout=0.5) as http:
            result = await http.run("send-email", TO, key="k-1")
        assert result == {"sent": 1, "to": "ada@example.org"}
        assert served.effects() == [("k-1", TO)]
        assert [seen[2] for seen in served.seen] == ["k-1", "k-1"]

    anyio.run(work, backend=real_clocks)


def test_reconcile_cannot_tell_while_the_first_request_is_processed(
    service: tuple[Service, str], real_clocks: str
) -> None:
    async def work() -> None:
        served, url = service
        served.begin("k-busy")
        async with domain(url) as http:
            with pytest.raises(LookupError, match="409"):
                await http.reconcile("send-email", TO, key="k-busy")
            await http.run("send-email", TO, key="k-2")
            with pytest.raises(LookupError, match="422"):
                await http.reconcile("send-email", {"to": "rex@example.org"}, key="k-2")
        assert served.effects() == [("k-2", TO)]

    anyio.run(work, backend=real_clocks)


def test_a_service_not_declared_keyed_is_never_sent_a_request_again(
    service: tuple[Service, str], real_clocks: str
) -> None:
    """Without ``keyed``, reconcile refuses (a repeat could send the email twice): the outcome stays
    ``interrupted``, and no request reached the service; and a run that gets no answer is not retried."""

    async def work() -> None:
        served, url = service
        async with domain(url, keyed=False) as http:
            conversation = Conversation(agent=Agent([]), domain=http, human=policy_human(), log=died_running())
            await conversation.recover()
        assert (outcome(conversation).status, outcome(conversation).code) == ("failed", "interrupted")
        assert served.seen == []
        served.slow = 1.5
        async with domain(url, keyed=False, timeout=0.5) as http:
            with pytest.raises(ActionError, match="did not answer") as raised:
                await http.run("send-email", TO, key="k-3")
        assert raised.value.code == "http-unreachable"
        assert len(served.seen) == 1

    anyio.run(work, backend=real_clocks)


def test_failures_are_action_errors_with_the_status_as_code(
    service: tuple[Service, str], real_clocks: str
) -> None:
    async def work() -> None:
        served, url = service
        async with domain(url) as http:
            with pytest.raises(ActionError, match=r"400 Bad Request: .*no such mailbox") as refused:
                await http.run("send-email", {"to": "x@invalid"}, key="k-4")
            assert refused.value.code == "http-400"
            assert await http.run("count-inbox", {"to": "ada@example.org", "limit": 5}, key="k-5") == {
                "count": 0,
                "limit": 5,
            }
        assert served.seen[-1] == ("GET", "/inbox", None)  # a read sends no key
        async with domain(f"http://127.0.0.1:{free_port()}", timeout=0.5, retries=1) as nowhere:
            began = time.monotonic()
            with pytest.raises(ActionError, match="after 2 attempt") as unreachable:
                await nowhere.run("send-email", TO, key="k-6")
            assert unreachable.value.code == "http-unreachable"
            assert time.monotonic() - began < 5
            with pytest.raises(LookupError, match="did not answer"):
                await nowhere.reconcile("send-email", TO, key="k-6")

    anyio.run(work, backend=real_clocks)


def test_the_domain_describes_and_checks_its_endpoints() -> None:
    http = domain("http://127.0.0.1:1")
    assert http.actions["send-email"].mutates and not http.actions["count-inbox"].mutates
    assert http.validate("send-email", TO) is None
    issue = http.validate("send-email", {"to": 1})
    assert issue is not None and issue.code == "invalid-payload"
    unknown = http.validate("drop-table", {})
    assert unknown is not None and unknown.code == "unknown-action"
    assert http.preview("send-email", TO) == 'Send email: to="ada@example.org"'
    assert http.vocabulary["send-email"]["description"] == "Send an email."
    with pytest.raises(ValueError, match="at least one endpoint"):
        HttpDomain("http://127.0.0.1:1", {})
