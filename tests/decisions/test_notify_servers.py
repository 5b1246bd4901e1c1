"""Notifications delivered to real servers on loopback: an SMTP server (aiosmtpd, in a thread of the test) and an
HTTP receiver (a Starlette app under uvicorn); retried, refused and unreachable deliveries end as the decision path
needs them to, logged without secrets and never raising into the caller.

Both backends on real clocks (the servers answer in real time, which a virtual clock would jump past); backoffs
are hundredths of a second and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import email.policy
import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import aiosmtpd
import anyio
import msgspec
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dial_runtime.decisions.notify import Notification, Notifications, Notifier, SmtpNotifier, WebhookNotifier
from dial_runtime.views.person import Card

from ..web_server import free_port, serving
from .test_notify import LINKS, Html

pytestmark = pytest.mark.anyio

#: The longest a test waits for a delivery, retries included.
BOUND = 30.0


def quick(*notifiers: Notifier) -> Notifications:
    """A dispatcher to ``notifiers`` whose three tries are hundredths of a second apart."""
    return Notifications(notifiers, attempts=3, backoff=0.01, max_backoff=0.05)


CARD = Card(
    id="sg-1",
    action="delete-file",
    text="Removing it now. <script>alert('words')</script>",
    preview="Delete <b>/tmp/report</b> & backups",
    destructive=True,
    payload={"path": "/tmp/<script>alert(1)</script>", "force": True},
    seq=3,
    time=1_700_000_000.0,
)

SENDER = "Dial runtime <dial@example.org>"

#: The aiosmtpd test suite's self-signed certificate (CN "aes"), shipped with the package.
CERTS = Path(aiosmtpd.__file__).parent / "tests" / "certs"


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    """Real clocks: the servers run in threads, in real time."""
    return real_clocks


def notification(kind: Any = "waiting", **options: Any) -> Notification:
    options.setdefault("links", LINKS)
    options.setdefault("recipients", ("alice@example.org", "ops"))
    return Notification.from_card(kind, "c-1", CARD, **options)


def notify_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The notify logger's lines, each checked to be one line."""
    lines = [record.getMessage() for record in caplog.records if record.name == "dial_runtime.notify"]
    assert all("\n" not in line for line in lines)
    return lines


# SMTP --------------------------------------------------------------------------------------------------------


class Mailbox:
    """An aiosmtpd handler that keeps what it is given; ``data_replies`` answer the first DATA commands (then
    ``250``), ``rcpt_replies`` the first RCPT commands for an address (then it is accepted)."""

    def __init__(
        self, data_replies: tuple[str, ...] = (), rcpt_replies: dict[str, list[str]] | None = None
    ) -> None:
        self.data_replies = list(data_replies)
        self.rcpt_replies = rcpt_replies or {}
        self.messages: list[tuple[str, list[str], EmailMessage]] = []
        self.sessions: list[tuple[bool, bool]] = []  # (over TLS, logged in) of each message taken
        self.data_commands = 0
        self.lock = threading.Lock()

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        with self.lock:
            scripted = self.rcpt_replies.get(address)
            if scripted:
                return scripted.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self.lock:
            self.data_commands += 1
            if self.data_replies:
                return self.data_replies.pop(0)
            content = envelope.original_content or b""
            message = BytesParser(policy=email.policy.default).parsebytes(content)
            assert isinstance(message, EmailMessage)
            self.messages.append((envelope.mail_from or "", list(envelope.rcpt_tos), message))
            self.sessions.append((session.ssl is not None, bool(session.authenticated)))
        return "250 OK"


@contextlib.contextmanager
def smtp_server(handler: Mailbox, **options: Any) -> Iterator[int]:
    """An SMTP server on a free loopback port for the block's length; its port."""
    port = free_port()
    controller = Controller(
        handler, hostname="127.0.0.1", port=port, server_hostname="mail.test", ready_timeout=10, **options
    )
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port bound for the block's length and never listened on: every connection to it is refused,
    and no other server can take it meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        yield int(bound.getsockname()[1])


def smtp(port: int, **options: Any) -> SmtpNotifier:
    options.setdefault("tls", "none")
    options.setdefault("recipients", {"ops": ["ops1@example.org", "ops2@example.org"]})
    return SmtpNotifier("127.0.0.1", port, sender=SENDER, timeout=10, **options)


async def test_an_email_arrives_whole_with_its_links_and_the_agents_words_escaped() -> None:
    mailbox = Mailbox()
    sent = notification()
    with smtp_server(mailbox) as port, anyio.fail_after(BOUND):
        delivery = await quick(smtp(port)).send(sent)
    assert delivery.ok and delivery.delivered == (f"smtp://127.0.0.1:{port}",)
    ((mail_from, rcpt_tos, message),) = mailbox.messages
    assert mail_from == "dial@example.org"
    assert rcpt_tos == ["alice@example.org", "ops1@example.org", "ops2@example.org"]
    assert message["Message-ID"] == f"<{sent.id}@example.org>"
    assert message["From"] == SENDER
    assert message["To"] == "alice@example.org, ops1@example.org, ops2@example.org"
    assert message["Subject"] == "Decision needed: delete-file (destructive) — Delete <b>/tmp/report</b> & backups"
    assert message["Auto-Submitted"] == "auto-generated"
    assert message["Date"]
    assert message.get_content_type() == "multipart/alternative"
    plain, page = (message.get_body((kind,)) for kind in ("plain", "html"))
    assert plain is not None and page is not None
    text, markup = plain.get_content(), page.get_content()
    # the plain part says it all as it is, the links included
    assert CARD.text in text and CARD.preview in text and "alert(1)" in text
    assert "This action is marked destructive." in text
    for name, label in [("accept", "Accept"), ("dismiss", "Dismiss"), ("open", "Open")]:
        assert f"{label}: {LINKS[name]}" in text
    # the HTML part: buttons for the links, every word from the agent or the payload escaped
    parsed = Html(markup)
    assert parsed.links == [(LINKS["accept"], "Accept"), (LINKS["dismiss"], "Dismiss"), (LINKS["open"], "Open")]
    assert "script" not in parsed.tags and "b" not in parsed.tags
    assert "<script>" not in markup and "&lt;script&gt;alert(1)&lt;/script&gt;" in markup
    assert "&lt;script&gt;alert(&#x27;words&#x27;)&lt;/script&gt;" in markup
    assert "Delete &lt;b&gt;/tmp/report&lt;/b&gt; &amp; backups" in markup


async def test_an_email_goes_over_starttls_and_logs_in(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(CERTS / "server.crt", CERTS / "server.key")
    client_tls = ssl.create_default_context(cafile=str(CERTS / "server.crt"))
    client_tls.check_hostname = False  # the certificate names "aes", not 127.0.0.1; it is still verified
    logins: list[tuple[bytes, bytes]] = []

    def authenticator(
        server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data == LoginPassword(b"dial", b"pw-SECRET"), handled=False)

    mailbox = Mailbox()
    options = {"tls_context": server_tls, "require_starttls": True, "authenticator": authenticator}
    with smtp_server(mailbox, auth_required=True, **options) as port, anyio.fail_after(BOUND):
        good = smtp(port, tls="starttls", ssl_context=client_tls, credentials=("dial", "pw-SECRET"))
        assert (await quick(good).send(notification())).ok
        wrong = smtp(port, tls="starttls", ssl_context=client_tls, credentials=("dial", "pw-WRONG"))
        refused = await quick(wrong).send(notification())
    assert mailbox.sessions == [(True, True)]
    assert logins[0] == (b"dial", b"pw-SECRET")
    assert set(logins[1:]) == {(b"dial", b"pw-WRONG")}  # smtplib tries each mechanism, in one session
    (failed,) = refused.undelivered
    assert failed.permanent and failed.attempts == 1 and failed.error.startswith("SMTP 535")
    assert "SECRET" not in caplog.text and "WRONG" not in caplog.text


async def test_a_server_without_starttls_gets_nothing_in_clear(caplog: pytest.LogCaptureFixture) -> None:
    mailbox = Mailbox()
    with smtp_server(mailbox) as port, anyio.fail_after(BOUND):
        notifier = smtp(port, tls="starttls", credentials=("dial", "pw-SECRET"))
        delivery = await quick(notifier).send(notification())
    assert mailbox.messages == [] and mailbox.data_commands == 0
    (failed,) = delivery.undelivered
    assert failed.permanent and failed.attempts == 1 and "STARTTLS" in failed.error
    (line,) = notify_records(caplog)
    assert "refused, not retried" in line and "SECRET" not in caplog.text


async def test_a_temporary_refusal_is_retried_with_the_same_message_id(caplog: pytest.LogCaptureFixture) -> None:
    mailbox = Mailbox(data_replies=("451 4.3.0 Try again later", "421 4.7.0 Busy"))
    sent = notification()
    with smtp_server(mailbox) as port, anyio.fail_after(BOUND):
        delivery = await quick(smtp(port)).send(sent)
    assert delivery.ok and mailbox.data_commands == 3
    ((_, _, message),) = mailbox.messages
    assert message["Message-ID"] == f"<{sent.id}@example.org>"
    lines = notify_records(caplog)
    assert len(lines) == 2 and "SMTP 451 4.3.0 Try again later" in lines[0] and "attempt 1 of 3" in lines[0]


async def test_a_permanent_refusal_is_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    mailbox = Mailbox(data_replies=("554 5.7.1 Message rejected",) * 3)
    with smtp_server(mailbox) as port, anyio.fail_after(BOUND):
        delivery = await quick(smtp(port)).send(notification())
    assert mailbox.data_commands == 1
    (failed,) = delivery.undelivered
    assert failed.permanent and failed.error == "SMTP 554 5.7.1 Message rejected"
    (line,) = notify_records(caplog)
    assert "refused, not retried" in line


async def test_a_retry_goes_only_to_the_recipients_that_did_not_take_it() -> None:
    mailbox = Mailbox(rcpt_replies={"ops2@example.org": ["450 4.2.1 Mailbox busy"]})
    sent = notification()
    with smtp_server(mailbox) as port, anyio.fail_after(BOUND):
        delivery = await quick(smtp(port)).send(sent)
    assert delivery.ok
    assert [rcpt_tos for _, rcpt_tos, _ in mailbox.messages] == [
        ["alice@example.org", "ops1@example.org"],
        ["ops2@example.org"],
    ]
    assert {message["Message-ID"] for _, _, message in mailbox.messages} == {f"<{sent.id}@example.org>"}


async def test_an_smtp_server_that_is_down_is_retried_then_given_up(caplog: pytest.LogCaptureFixture) -> None:
    with closed_port() as port, anyio.fail_after(BOUND):
        delivery = await quick(smtp(port)).send(notification())
    (failed,) = delivery.undelivered
    assert (failed.attempts, failed.permanent) == (3, False)
    assert failed.error.startswith("ConnectionRefusedError")
    lines = notify_records(caplog)
    assert len(lines) == 3 and "gave up after 3 attempts" in lines[-1]


# Webhooks ----------------------------------------------------------------------------------------------------


class Receiver:
    """An HTTP receiver that keeps each POST (path, headers, body) and answers the first ones with ``statuses``
    (then 200)."""

    def __init__(self, statuses: tuple[int, ...] = ()) -> None:
        self.statuses = list(statuses)
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        self.app = Starlette(routes=[Route("/{path:path}", self.receive, methods=["POST"])])

    async def receive(self, request: Request) -> Response:
        self.posts.append((request.url.path, dict(request.headers), await request.body()))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 429:
            return Response("slow down", status_code=429, headers={"Retry-After": "0"})
        return Response("ok" if status < 400 else "invalid_payload", status_code=status)


@contextlib.contextmanager
def receiving(receiver: Receiver) -> Iterator[str]:
    with serving(receiver.app) as url:
        yield url


def block_kit_problems(body: Any) -> list[str]:
    """What in ``body`` a Slack incoming webhook would refuse: a missing ``text``, an unknown block, a text object
    that is empty or too long, a button without a URL, ... (the parts of Block Kit this message uses)."""
    problems: list[str] = []

    def text_object(value: Any, where: str, limit: int, kinds: tuple[str, ...] = ("plain_text", "mrkdwn")) -> None:
        if not isinstance(value, dict) or value.get("type") not in kinds or set(value) - {"type", "text", "emoji"}:
            problems.append(f"{where}: not a text object of {kinds}: {value!r}")
        elif not isinstance(value["text"], str) or not 0 < len(value["text"]) <= limit:
            problems.append(f"{where}: text of {len(str(value.get('text')))} characters (limit {limit})")
        elif "<" in value["text"] or ">" in value["text"]:
            problems.append(f"{where}: unescaped < or > in {value['text']!r}")

    if set(body) != {"text", "blocks"} or not isinstance(body["text"], str) or not body["text"]:
        problems.append(f"top level: {sorted(body)}")
    blocks = body.get("blocks")
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 50:
        return [*problems, "blocks: not a list of 1 to 50"]
    action_ids: list[str] = []
    for index, block in enumerate(blocks):
        where = f"blocks[{index}] ({block.get('type')})"
        if block["type"] == "header":
            text_object(block["text"], where, 150, ("plain_text",))
        elif block["type"] == "section":
            text_object(block["text"], where, 3000)
        elif block["type"] == "context":
            if not 0 < len(block["elements"]) <= 10:
                problems.append(f"{where}: {len(block['elements'])} elements")
            for element in block["elements"]:
                text_object(element, where, 3000)
        elif block["type"] == "actions":
            if not 0 < len(block["elements"]) <= 25:
                problems.append(f"{where}: {len(block['elements'])} elements")
            for button in block["elements"]:
                if button.get("type") != "button" or not str(button.get("url", "")).startswith(
                    ("http:", "https:")
                ):
                    problems.append(f"{where}: not a URL button: {button!r}")
                text_object(button.get("text"), where, 75, ("plain_text",))
                if button.get("style", "primary") not in ("primary", "danger"):
                    problems.append(f"{where}: style {button['style']!r}")
                action_ids.append(button.get("action_id", ""))
        else:
            problems.append(f"{where}: a block of an unexpected type")
    if len(set(action_ids)) != len(action_ids) or not all(0 < len(key) <= 255 for key in action_ids):
        problems.append(f"action ids: {action_ids}")
    return problems


async def test_a_webhook_gets_a_message_slack_accepts() -> None:
    receiver = Receiver()
    sent = notification()
    with receiving(receiver) as url, anyio.fail_after(BOUND):
        hook = WebhookNotifier(f"{url}/services/T0/B0/X", headers={"Authorization": "Bearer hook-token"})
        delivery = await quick(hook).send(sent)
    assert delivery.ok
    ((path, headers, body),) = receiver.posts
    assert path == "/services/T0/B0/X"
    assert headers["idempotency-key"] == sent.id
    assert headers["content-type"] == "application/json"
    assert headers["authorization"] == "Bearer hook-token"
    message = json.loads(body)
    assert block_kit_problems(message) == []
    assert message["text"].startswith("Decision needed: delete-file (destructive) — Delete &lt;b&gt;")
    shown = json.dumps(message)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown and "<script>" not in shown
    (actions,) = [block for block in message["blocks"] if block["type"] == "actions"]
    assert [(button["text"]["text"], button["url"]) for button in actions["elements"]] == [
        ("Accept", LINKS["accept"]),
        ("Dismiss", LINKS["dismiss"]),
        ("Open", LINKS["open"]),
    ]


async def test_a_decided_notification_reaches_a_json_receiver_whole() -> None:
    receiver = Receiver()
    decided_card = msgspec.structs.replace(
        CARD, status="done", decision="edit", decided_by="bob", decided_via="slack", decided_at=1_700_000_900.0
    )
    sent = Notification.from_card(
        "decided", "c-1", decided_card, links={"open": LINKS["open"]}, recipients=("ops",)
    )
    with receiving(receiver) as url, anyio.fail_after(BOUND):
        json_hook = WebhookNotifier(f"{url}/json", shape="json")
        slack_hook = WebhookNotifier(f"{url}/slack")
        delivery = await quick(json_hook, slack_hook).send(sent)
    assert delivery.ok
    bodies = {path: body for path, _, body in receiver.posts}
    assert msgspec.json.decode(bodies["/json"], type=Notification) == sent
    slack = json.loads(bodies["/slack"])
    assert block_kit_problems(slack) == []
    assert slack["text"].startswith("Accepted with an edit: delete-file")
    assert "Accepted with an edit by bob via slack" in json.dumps(slack)


async def test_a_receiver_that_fails_twice_gets_it_on_the_third_try_with_the_same_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver = Receiver(statuses=(503, 429))
    sent = notification()
    with receiving(receiver) as url, anyio.fail_after(BOUND):
        delivery = await quick(WebhookNotifier(f"{url}/hook")).send(sent)
    assert delivery.ok and len(receiver.posts) == 3
    assert {headers["idempotency-key"] for _, headers, _ in receiver.posts} == {sent.id}
    assert len({body for _, _, body in receiver.posts}) == 1
    lines = notify_records(caplog)
    assert len(lines) == 2
    assert "HTTP 503: invalid_payload" in lines[0] and "HTTP 429: slow down" in lines[1]


async def test_a_receiver_that_refuses_the_request_is_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    receiver = Receiver(statuses=(400, 400, 400))
    with receiving(receiver) as url, anyio.fail_after(BOUND):
        secret_url = url.replace("http://", "http://user:pw-SECRET@") + "/services/T0/B0/TOKEN-SECRET"
        delivery = await quick(WebhookNotifier(secret_url)).send(notification())
    assert len(receiver.posts) == 1
    (failed,) = delivery.undelivered
    assert failed.permanent and failed.attempts == 1 and failed.error == "HTTP 400: invalid_payload"
    assert failed.notifier == url.replace("http://", "http://***@") + "/services/***"
    (line,) = notify_records(caplog)
    assert "refused, not retried" in line and failed.notifier in line
    assert "SECRET" not in caplog.text


async def test_a_receiver_that_is_down_is_retried_then_given_up_and_the_others_still_get_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver = Receiver()
    with closed_port() as port, receiving(receiver) as url, anyio.fail_after(BOUND):
        down = f"http://127.0.0.1:{port}/services/T0/B0/TOKEN-SECRET"
        notifications = quick(WebhookNotifier(down), WebhookNotifier(f"{url}/up"))
        delivery = await notifications.send(notification())
    assert delivery.delivered == (f"{url}/up",) and len(receiver.posts) == 1
    (failed,) = delivery.undelivered
    assert (failed.attempts, failed.permanent) == (3, False) and failed.error.startswith("ConnectError")
    assert list(notifications.undelivered) == [failed]
    lines = notify_records(caplog)
    assert len(lines) == 3 and "gave up after 3 attempts" in lines[-1]
    assert "SECRET" not in caplog.text
