"""Notifications without a network: the record and its id, the email and Slack renderings of untrusted text,
masked URLs, which failures are final, and the dispatcher's retries, backoff, logs and independence, on trio's
virtual clock so that backoffs of seconds pass at once (``test_notify_servers.py`` beside it runs the dispatcher on
both backends, against real servers)."""

from __future__ import annotations

import email.policy
import logging
import smtplib
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import anyio
import httpx
import msgspec
import pytest
import trio.testing

from dial_runtime.decisions.notify import (
    Notification,
    Notifications,
    SmtpNotifier,
    WebhookNotifier,
    email_message,
    is_permanent,
    mask_url,
    slack_message,
)
from dial_runtime.views.person import Card, CardDecision

SHOWN_AT = 1_700_000_000.0
DECIDED_AT = 1_700_000_600.0

#: A suggestion whose words, preview and payload carry markup, as an agent's might.
CARD = Card(
    id="sg-1",
    action="delete-file",
    text="I will remove it. <script>alert('words')</script>",
    preview="Delete <b>/tmp/report</b> & its backups",
    destructive=True,
    proposed={"path": "/tmp/report<script>alert(1)</script>"},
    payload={"path": "/tmp/report<script>alert(1)</script>"},
    seq=3,
    time=SHOWN_AT,
)

DECIDED = msgspec.structs.replace(
    CARD,
    status="running",
    decision="accept",
    decided_by="alice",
    decided_via="web",
    decided_at=DECIDED_AT,
    decisions=(CardDecision(decision="accept", by="alice", via="web", seq=5, time=DECIDED_AT),),
)

LINKS = {
    "open": "https://app.example.org/c/c-1?s=sg-1",
    "dismiss": "https://app.example.org/d/sg-1/dismiss?sig=d1&exp=9",
    "accept": "https://app.example.org/d/sg-1/accept?sig=a1&exp=9",
}


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    """trio with a virtual clock: the backoffs measured here are seconds long."""
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}


def waiting(**options: Any) -> Notification:
    return Notification.from_card(
        "waiting", "c-1", CARD, links=LINKS, recipients=("alice@example.org",), **options
    )


def test_a_notification_carries_the_suggestion_as_shown() -> None:
    notification = waiting()
    assert notification.kind == "waiting"
    assert (notification.conversation_id, notification.suggestion_id) == ("c-1", "sg-1")
    assert (notification.action, notification.text, notification.preview) == (CARD.action, CARD.text, CARD.preview)
    assert notification.payload == CARD.payload
    assert notification.digest == CARD.digest
    assert notification.destructive
    assert notification.recipients == ("alice@example.org",)
    assert notification.links == LINKS
    assert notification.at == SHOWN_AT
    assert notification.decision is None
    assert notification.id.startswith("nt-") and len(notification.id) == 35


def test_a_decided_notification_says_who_decided_and_how() -> None:
    notification = Notification.from_card("decided", "c-1", DECIDED, links={"open": LINKS["open"]})
    assert (notification.decision, notification.decided_by, notification.decided_via) == ("accept", "alice", "web")
    assert notification.at == DECIDED_AT
    assert notification.status == "running"


def test_the_id_is_the_same_for_the_same_notification_and_only_for_it() -> None:
    first = waiting()
    # built again later, with other links, recipients or time: the same notification, the same id
    again = Notification.from_card("waiting", "c-1", CARD, links={}, recipients=("ops",), at=SHOWN_AT + 60)
    assert again.id == first.id
    others = {
        Notification.from_card("waiting", "c-2", CARD).id,
        Notification.from_card("decided", "c-1", DECIDED).id,
        Notification.from_card("reminder", "c-1", CARD, occasion=1).id,
        Notification.from_card("reminder", "c-1", CARD, occasion=2).id,
        Notification.from_card("escalated", "c-1", CARD, occasion="managers").id,
        # a payload that waits anew (after a refused edit) is news
        Notification.from_card("waiting", "c-1", msgspec.structs.replace(CARD, payload={"path": "/tmp/b"})).id,
    }
    assert first.id not in others and len(others) == 6


@pytest.mark.parametrize(
    ("kind", "card", "occasion", "problem"),
    [
        ("reminder", CARD, None, "needs an occasion"),
        ("escalated", CARD, None, "needs an occasion"),
        ("decided", CARD, None, "no decision"),
        ("forgotten", CARD, None, "kind must be one of"),
    ],
)
def test_a_notification_that_cannot_be_told_apart_is_refused(
    kind: Any, card: Card, occasion: int | None, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        Notification.from_card(kind, "c-1", card, occasion=occasion)


def test_a_notification_reads_back_from_its_json() -> None:
    notification = Notification.from_card("decided", "c-1", DECIDED, links=LINKS, recipients=("ops", "a@b.org"))
    assert msgspec.json.decode(msgspec.json.encode(notification), type=Notification) == notification


class Html(HTMLParser):
    """The start tags of an HTML document, and the links with their text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "a":
            self._href = dict(attrs).get("href") or ""

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((self._href, data))
            self._href = None


def test_a_link_that_is_not_http_never_becomes_a_button() -> None:
    links = {
        "accept": "javascript:alert(1)",
        "open": "https://app.example.org/c/c-1",
        "dismiss": "data:text/html,x",
    }
    notification = Notification.from_card("waiting", "c-1", CARD, links=links)
    message = email_message(notification, sender="dial@example.org", to=["alice@example.org"])
    text = message.get_body(("plain",))
    page = message.get_body(("html",))
    assert text is not None and page is not None
    assert Html(page.get_content()).links == [("https://app.example.org/c/c-1", "Open")]
    for shown in (
        text.get_content(),
        page.get_content(),
        msgspec.json.encode(slack_message(notification)).decode(),
    ):
        assert "javascript:" not in shown and "data:text" not in shown


def test_the_email_escapes_everything_the_agent_said() -> None:
    message = email_message(waiting(), sender="Dial <dial@example.org>", to=["alice@example.org"])
    page = message.get_body(("html",))
    assert page is not None
    parsed = Html(page.get_content())
    assert "script" not in parsed.tags and "b" not in parsed.tags
    assert [label for _, label in parsed.links] == ["Accept", "Dismiss", "Open"]
    assert [href for href, _ in parsed.links] == [LINKS["accept"], LINKS["dismiss"], LINKS["open"]]
    assert message["Message-ID"] == f"<{waiting().id}@example.org>"
    # the subject is one line, whatever the preview holds
    multiline = msgspec.structs.replace(CARD, preview="line one\r\nBcc: eve@example.org\nline three")
    subject = email_message(Notification.from_card("waiting", "c-1", multiline), sender="d@e.org", to=["a@b.org"])
    assert "\n" not in subject["Subject"] and "\r" not in subject["Subject"]
    assert subject["Bcc"] is None
    headers = subject.as_bytes(policy=email.policy.SMTP).partition(b"\r\n\r\n")[0]
    assert b"\nBcc:" not in headers


def texts(value: Any) -> list[str]:
    """Every ``text`` string of a Slack message, wherever it is."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += [item] if key == "text" and isinstance(item, str) else texts(item)
    elif isinstance(value, list):
        for item in value:
            found += texts(item)
    return found


def test_a_slack_message_escapes_and_stays_within_slacks_limits() -> None:
    payload = {"text": "<!channel> & ```break out``` " + "x" * 9000 + " & <@U123>"}
    card = msgspec.structs.replace(CARD, payload=payload, preview="<http://evil.example|click> & " * 200)
    message = slack_message(Notification.from_card("waiting", "c-1", card, links=LINKS))
    for text in texts(message):
        assert "<" not in text and ">" not in text
        assert "&amp;" in text or "&" not in text.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "")
    header, *sections = message["blocks"]
    assert len(header["text"]["text"]) <= 150
    for block in sections:
        if block["type"] == "section":
            assert 0 < len(block["text"]["text"]) <= 3000
    code = next(
        block["text"]["text"] for block in sections if block["type"] == "section" and "Payload" in str(block)
    )
    assert code.endswith("```") and code.count("```") == 2  # the payload's own fences cannot close the block
    buttons = next(block["elements"] for block in sections if block["type"] == "actions")
    assert [button["url"] for button in buttons] == [LINKS["accept"], LINKS["dismiss"], LINKS["open"]]
    assert buttons[0]["style"] == "danger"  # accepting a destructive action


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/services/***"),
        ("https://user:pa55@example.org:8443/hook?token=abc", "https://***@example.org:8443/hook?***"),
        ("http://127.0.0.1:9000/hook", "http://127.0.0.1:9000/hook"),
        ("http://[::1]:9000/a/b", "http://[::1]:9000/a/***"),
        ("https://discord.com/api/webhooks/1/TOKEN", "https://discord.com/api/***"),
        ("http://host:notaport/x", "<a URL that does not parse>"),
    ],
)
def test_a_url_in_a_log_shows_no_secret(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/hook")
    return httpx.HTTPStatusError("x", request=request, response=httpx.Response(status, request=request))


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (status_error(400), True),
        (status_error(401), True),
        (status_error(404), True),
        (status_error(410), True),
        (status_error(302), True),
        (status_error(408), False),
        (status_error(429), False),
        (status_error(500), False),
        (status_error(503), False),
        (smtplib.SMTPDataError(554, b"5.7.1 rejected"), True),
        (smtplib.SMTPDataError(451, b"4.3.0 try later"), False),
        (smtplib.SMTPAuthenticationError(535, b"5.7.8 bad credentials"), True),
        (smtplib.SMTPRecipientsRefused({"a@b.org": (550, b"no"), "c@d.org": (450, b"busy")}), False),
        (smtplib.SMTPRecipientsRefused({"a@b.org": (550, b"no"), "c@d.org": (553, b"bad")}), True),
        (smtplib.SMTPServerDisconnected("gone"), False),
        (smtplib.SMTPNotSupportedError("STARTTLS extension not supported by server."), True),
        (ConnectionRefusedError(111, "Connection refused"), False),
        (TimeoutError(), False),
        (httpx.ConnectError("refused"), False),
        (httpx.UnsupportedProtocol("ftp"), True),
        (ValueError("no email address"), True),
        (RuntimeError("the receiver's bug"), False),
    ],
)
def test_which_failures_are_final(error: Exception, permanent: bool) -> None:
    assert is_permanent(error) is permanent


class Flaky:
    """A notifier that fails with ``error`` (made anew each time) ``failures`` times, then delivers; it records
    when each try came and the ids it was given."""

    def __init__(self, failures: int, error: Callable[[], Exception] = lambda: RuntimeError("not yet")) -> None:
        self.failures = failures
        self.error = error
        self.tries: list[float] = []
        self.ids: list[str] = []
        self.label = f"flaky-{failures}"

    async def notify(self, notification: Notification) -> None:
        self.tries.append(anyio.current_time())
        self.ids.append(notification.id)
        if len(self.tries) <= self.failures:
            raise self.error()


class Hanging:
    """A notifier that never returns."""

    async def notify(self, notification: Notification) -> None:
        await anyio.sleep_forever()


def one_line_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    records = [record for record in caplog.records if record.name == "dial_runtime.notify"]
    assert all("\n" not in record.getMessage() for record in records)
    return records


@pytest.mark.anyio
async def test_a_failing_notifier_is_retried_with_bounded_backoff_and_jitter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "dial_runtime")
    flaky = Flaky(failures=4)
    notifications = Notifications([flaky], attempts=5, backoff=1.0, max_backoff=4.0)
    delivery = await notifications.send(waiting())
    assert delivery.ok and delivery.delivered == ("flaky-4",)
    assert flaky.ids == [waiting().id] * 5
    gaps = [later - earlier for earlier, later in zip(flaky.tries, flaky.tries[1:], strict=False)]
    # min(max_backoff, backoff * 2 ** (n - 1)) and a random part of up to backoff, never over max_backoff
    for gap, (least, most) in zip(gaps, [(1.0, 2.0), (2.0, 3.0), (4.0, 4.0), (4.0, 4.0)], strict=True):
        assert least - 1e-6 <= gap <= most + 1e-6
    warnings = one_line_records(caplog)
    assert [record.levelno for record in warnings] == [logging.WARNING] * 4
    assert "attempt 1 of 5" in warnings[0].getMessage() and "RuntimeError: not yet" in warnings[0].getMessage()
    assert not notifications.undelivered


@pytest.mark.anyio
async def test_a_notifier_that_keeps_failing_is_given_up_and_the_caller_is_not_raised_into(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "dial_runtime")
    broken, fine = Flaky(failures=99), Flaky(failures=0)
    notifications = Notifications([broken, fine], attempts=3, backoff=0.5)
    delivery = await notifications.send(waiting())
    assert delivery.delivered == ("flaky-0",)
    (failed,) = delivery.undelivered
    assert (failed.notifier, failed.attempts, failed.permanent) == ("flaky-99", 3, False)
    assert failed.error == "RuntimeError: not yet"
    assert failed.notification_id == waiting().id
    assert list(notifications.undelivered) == [failed]
    records = one_line_records(caplog)
    assert [record.levelno for record in records] == [logging.WARNING, logging.WARNING, logging.ERROR]
    assert "gave up after 3 attempts" in records[-1].getMessage()


@pytest.mark.anyio
async def test_a_final_failure_is_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "dial_runtime")
    refused = Flaky(failures=99, error=lambda: status_error(400))
    delivery = await Notifications([refused], attempts=5).send(waiting())
    assert len(refused.tries) == 1
    assert delivery.undelivered[0].permanent
    (record,) = one_line_records(caplog)
    assert record.levelno == logging.ERROR and "refused, not retried" in record.getMessage()


@pytest.mark.anyio
async def test_a_notifier_that_hangs_is_cut_off_and_the_others_deliver() -> None:
    fine = Flaky(failures=1)
    notifications = Notifications([Hanging(), fine], attempts=2, backoff=1.0, attempt_timeout=30.0)
    with anyio.fail_after(600):
        delivery = await notifications.send(waiting())
    assert delivery.delivered == ("flaky-1",)
    (failed,) = delivery.undelivered
    assert (failed.notifier, failed.attempts, failed.error) == ("Hanging", 2, "TimeoutError")


@pytest.mark.anyio
async def test_a_retry_waits_as_long_as_the_receiver_asks_within_the_bound() -> None:
    def busy() -> Exception:
        request = httpx.Request("POST", "http://127.0.0.1/hook")
        response = httpx.Response(429, headers={"Retry-After": "7"}, request=request)
        return httpx.HTTPStatusError("HTTP 429", request=request, response=response)

    flaky = Flaky(failures=2, error=busy)
    await Notifications([flaky], attempts=3, backoff=0.1, max_backoff=10.0).send(waiting())
    gaps = [later - earlier for earlier, later in zip(flaky.tries, flaky.tries[1:], strict=False)]
    assert gaps == pytest.approx([7.0, 7.0])
    bounded = Flaky(failures=1, error=busy)
    await Notifications([bounded], attempts=2, backoff=0.1, max_backoff=3.0).send(waiting())
    assert bounded.tries[1] - bounded.tries[0] == pytest.approx(3.0)


@pytest.mark.anyio
async def test_the_callers_cancellation_goes_through() -> None:
    notifications = Notifications([Flaky(failures=99)], attempts=10, backoff=100.0, max_backoff=100.0)
    with anyio.move_on_after(60) as scope:
        await notifications.send(waiting())
    assert scope.cancelled_caught
    assert not notifications.undelivered


def test_no_notifier_is_built_to_leak_a_secret() -> None:
    with pytest.raises(ValueError, match="in clear"):
        SmtpNotifier("smtp.example.org", 25, sender="d@example.org", tls="none", credentials=("u", "pw"))
    local = SmtpNotifier("127.0.0.1", 25, sender="d@example.org", tls="none", credentials=("u", "pw-SECRET"))
    assert "pw-SECRET" not in repr(local)
    hook = WebhookNotifier(
        "https://hooks.slack.com/services/T/B/SECRET", headers={"Authorization": "Bearer SECRET"}
    )
    assert "SECRET" not in repr(hook) and "SECRET" not in hook.label
    with pytest.raises(ValueError, match="http or https"):
        WebhookNotifier("file:///etc/passwd")
    with pytest.raises(ValueError, match="shape"):
        WebhookNotifier("https://example.org/hook", shape="teams")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attempts"):
        Notifications([], attempts=0)


@pytest.mark.anyio
async def test_recipients_resolve_to_addresses() -> None:
    notification = Notification.from_card(
        "escalated", "c-1", CARD, occasion="ops", recipients=("ops", "bob@example.org", "ops", "nobody")
    )
    mapped = SmtpNotifier(
        "127.0.0.1", sender="d@example.org", recipients={"ops": ["o1@example.org", "o2@example.org"]}
    )
    assert await mapped.addresses(notification) == ["o1@example.org", "o2@example.org", "bob@example.org"]
    assert await SmtpNotifier("127.0.0.1", sender="d@e.org").addresses(notification) == ["bob@example.org"]

    async def lookup(given: Notification) -> list[str]:
        return [f"{name}@team.example.org" for name in given.recipients if "@" not in name]

    found = await SmtpNotifier("127.0.0.1", sender="d@e.org", recipients=lookup).addresses(notification)
    assert found == ["ops@team.example.org", "nobody@team.example.org"]
    nobody = Notification.from_card("waiting", "c-1", CARD, recipients=("ops",))
    with pytest.raises(ValueError, match="no email address"):
        await SmtpNotifier("127.0.0.1", sender="d@e.org").addresses(nobody)
    injected = Notification.from_card("waiting", "c-1", CARD, recipients=("a@b.org\r\nBcc: eve@evil.org",))
    with pytest.raises(ValueError, match="no email address"):
        await SmtpNotifier("127.0.0.1", sender="d@e.org").addresses(injected)


@pytest.mark.anyio
async def test_no_retry_record_of_any_logger_names_a_webhooks_secret_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """stamina's own instrumentation (the ``stamina`` logger) sees the masked one-line form of a failure too."""
    caplog.set_level(logging.DEBUG)

    def leaky() -> Exception:
        return RuntimeError("POST https://hooks.example.org/services/T/B/SECRET failed")

    flaky = Flaky(failures=2, error=leaky)
    await Notifications([flaky], attempts=3, backoff=0.5).send(waiting())
    assert len(flaky.tries) == 3
    assert {record.name for record in caplog.records} >= {"stamina", "dial_runtime.notify"}
    for record in caplog.records:
        assert "SECRET" not in record.getMessage() and "SECRET" not in repr(vars(record)), record.name
