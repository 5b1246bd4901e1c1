"""Notifications: tell people that a suggestion waits for their decision, was reminded, escalated or decided.

A :class:`Notification` is one such moment, built from the :class:`~dial_runtime.views.person.Card` the
person sees (:meth:`Notification.from_card`) with the links the application signed for it (``accept``,
``dismiss``, ``open``, ...). Its ``id`` is derived from the conversation, the suggestion, the kind and the
occasion, never from the time: the same notification built again (a retry, a process restarted after a crash)
has the same id, so a receiver can deduplicate.

A notifier is anything with ``async def notify(self, notification) -> None`` (:class:`Notifier`) that raises to
fail. Two come with the library:

- :class:`SmtpNotifier`: an email (plain text and an HTML alternative whose links are buttons) through an SMTP
  server, with STARTTLS or implicit TLS, optional login, a ``Message-ID`` derived from the notification's id;
- :class:`WebhookNotifier`: a JSON POST with httpx, by default the body a Slack incoming webhook accepts
  (``text`` and ``blocks``), or the notification itself (``shape="json"``); it sends ``Idempotency-Key``.

Everything that comes from the agent or the payload is untrusted: it is escaped in HTML and in Slack's mrkdwn,
and a link whose scheme is not ``http`` or ``https`` never becomes a button.

:class:`Notifications` delivers one notification to every notifier, each on its own, retrying failures under
the runtime's one retry policy (stamina's loop, bounded exponential backoff with jitter), logging each failure in
one line (``dial_runtime.notify`` logger, URLs masked) and never raising into its caller, which is the decision
path: it returns what was delivered and what failed for good (:class:`Delivery`), and keeps the latter in
:attr:`Notifications.undelivered`.
"""

from __future__ import annotations

import email.policy
import email.utils
import hashlib
import html
import inspect
import ipaddress
import json
import logging
import re
import smtplib
import ssl
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from email.message import EmailMessage
from typing import Any, Literal, Protocol, TypeAlias, get_args
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import httpx
import msgspec

from .._retry import RetryPolicy, parse_retry_after
from ..views.person import Card

__all__ = [
    "KINDS",
    "Delivery",
    "Notification",
    "NotificationKind",
    "Notifications",
    "Notifier",
    "RecipientsLike",
    "SmtpNotifier",
    "Undelivered",
    "WebhookNotifier",
    "WebhookShape",
    "email_message",
    "is_permanent",
    "mask_url",
    "slack_message",
]

logger = logging.getLogger("dial_runtime.notify")

#: What a notification says happened: the suggestion started ``waiting`` for a decision, a ``reminder`` of it
#: went out, it was ``escalated`` (to other people, or more urgently), or it was ``decided``; a ``digest`` tells
#: one person of several suggestions that started waiting for them, in one message.
NotificationKind = Literal["waiting", "reminder", "escalated", "decided", "digest"]

#: Every :data:`NotificationKind`, in the order a suggestion goes through them.
KINDS: tuple[str, ...] = get_args(NotificationKind)

#: How the links are ordered and named when they are shown; other links follow in the order given.
_LINK_LABELS = {"accept": "Accept", "dismiss": "Dismiss", "open": "Open"}

#: A decision (``CardDecision.decision``) in words.
_DECIDED = {
    "accept": "Accepted",
    "dismiss": "Dismissed",
    "edit": "Accepted with an edit",
    "say": "Answered in words instead",
    "expire": "Expired",
}

_HEADLINES = {
    "waiting": "Decision needed",
    "reminder": "Reminder: decision needed",
    "escalated": "Escalated: decision needed",
}


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """One moment of a suggestion worth telling people about, as JSON-ready data.

    ``kind`` is what happened (:data:`NotificationKind`), ``at`` when (epoch seconds). The suggestion as the
    person is shown it: ``action``, the agent's words (``text``), the domain's ``preview``, the ``payload`` that
    waits or was decided on (JSON data) and its ``digest``, the ``destructive`` mark, and its ``status``.
    ``recipients`` are whom to tell, as the application names them (people, addresses, roles); each notifier
    resolves them. ``links`` maps a name (``accept``, ``dismiss``, ``open``, ...) to a URL. For ``decided``:
    the ``decision``, who made it (``decided_by``), through which surface (``decided_via``), and the ``outcome``
    in words once there is one.

    A ``digest`` (:meth:`digest_of`) is about no one suggestion: it holds the ``waiting`` notifications it tells of
    in ``cards`` (each with its own links), ``links`` are the digest's own (``inbox``), and the suggestion's
    fields are empty.

    ``id`` identifies the notification, not an attempt to send it: every retry carries it (``Idempotency-Key``,
    ``Message-ID``), so a receiver drops a copy it has already seen. ``msgspec.json.encode`` writes it and
    ``msgspec.json.decode(..., type=Notification)`` reads it back.
    """

    id: str
    kind: NotificationKind
    conversation_id: str
    suggestion_id: str
    action: str
    at: float
    text: str = ""
    preview: str = ""
    payload: Any = None
    digest: str = ""
    destructive: bool = False
    status: str = "pending"
    recipients: tuple[str, ...] = ()
    links: dict[str, str] = {}
    decision: str | None = None
    decided_by: str | None = None
    decided_via: str | None = None
    outcome: str = ""
    cards: tuple[Notification, ...] = ()

    @classmethod
    def digest_of(
        cls,
        recipient: str,
        waiting: Sequence[Notification],
        *,
        links: Mapping[str, str] | None = None,
        at: float | None = None,
    ) -> Notification:
        """One notification telling ``recipient`` of every ``waiting`` notification of ``waiting`` (theirs, each
        with its own links), in the order given; ``links`` are the digest's own (``inbox``: where everything
        waiting for them is listed). Its id follows from the recipient and the notifications it holds, so the same
        digest built again has the same id. ``ValueError`` for anything but ``waiting`` notifications."""
        if not waiting or any(each.kind != "waiting" for each in waiting):
            raise ValueError(
                "Notification.digest: tells of one or more waiting notifications, and of nothing else"
            )
        held = hashlib.sha256("\n".join(sorted(each.id for each in waiting)).encode()).hexdigest()
        return cls(
            id=_notification_id("", recipient, "digest", held),
            kind="digest",
            conversation_id="",
            suggestion_id="",
            action="",
            at=_now() if at is None else at,
            destructive=any(each.destructive for each in waiting),
            recipients=(recipient,),
            links=dict(links or {}),
            cards=tuple(waiting),
        )

    @classmethod
    def from_card(
        cls,
        kind: NotificationKind,
        conversation_id: str,
        card: Card,
        *,
        links: Mapping[str, str] | None = None,
        recipients: Iterable[str] = (),
        at: float | None = None,
        occasion: str | int | None = None,
    ) -> Notification:
        """The notification of ``kind`` for ``card`` in conversation ``conversation_id``.

        ``occasion`` tells this notification from another of the same kind on the same suggestion, and goes into
        its id: for ``reminder`` and ``escalated`` it is required (the reminder's number, the escalation's level
        or target), since nothing in the card tells one reminder from the next. By default a ``waiting``
        notification's occasion is the digest of the payload waiting (a payload that waits anew after a refused
        edit is news), and a ``decided`` one's the log entry of the last decision. ``at`` defaults to when the
        card was shown (``waiting``) or decided (``decided``); pass it for a reminder or an escalation.
        ``ValueError`` for an unknown kind, a reminder or escalation without ``occasion``, or ``decided`` for a
        card without a decision.
        """
        if kind not in KINDS or kind == "digest":
            raise ValueError(
                f"Notification: kind must be one of {', '.join(KINDS[:-1])}, got {kind!r} (a digest: digest_of())"
            )
        if kind == "decided" and card.decision is None:
            raise ValueError(f"Notification: {card.id!r} has no decision to notify")
        if occasion is None:
            if kind in ("reminder", "escalated"):
                raise ValueError(f"Notification: a {kind} needs an occasion (its number, level or target)")
            if kind == "waiting":
                occasion = card.digest
            else:
                last = card.decisions[-1] if card.decisions else None
                occasion = f"seq {last.seq}" if last is not None and last.seq is not None else str(card.decided_at)
        if at is None:
            at = card.decided_at if kind == "decided" else card.time
        decided = kind == "decided"
        return cls(
            id=_notification_id(conversation_id, card.id, kind, str(occasion)),
            kind=kind,
            conversation_id=conversation_id,
            suggestion_id=card.id,
            action=card.action,
            at=at if at is not None else _now(),
            text=card.text,
            preview=card.preview,
            payload=card.payload,
            digest=card.digest,
            destructive=card.destructive,
            status=card.status,
            recipients=tuple(recipients),
            links=dict(links or {}),
            decision=card.decision if decided else None,
            decided_by=card.decided_by if decided else None,
            decided_via=card.decided_via if decided else None,
            outcome=card.outcome if decided else "",
        )

    @property
    def payload_json(self) -> str:
        """The payload as indented JSON text, as it is shown."""
        return json.dumps(self.payload, indent=2, ensure_ascii=False, default=str)


def _notification_id(conversation_id: str, suggestion_id: str, kind: str, occasion: str) -> str:
    """``nt-`` and 32 hex digits of the SHA-256 of what identifies the notification."""
    text = json.dumps([conversation_id, suggestion_id, kind, occasion], separators=(",", ":"), ensure_ascii=False)
    return "nt-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _now() -> float:
    return datetime.now(timezone.utc).timestamp()


class Notifier(Protocol):
    """Whatever tells people about a notification: ``notify`` returns once it is delivered and raises to fail
    (:func:`is_permanent` says whether :class:`Notifications` tries again). A ``label`` attribute, when there is
    one, names the notifier in logs and in :class:`Undelivered`; it must hold no secret."""

    async def notify(self, notification: Notification, /) -> None: ...


# What the notification says, for every shape ----------------------------------------------------------------


def _headline(notification: Notification) -> str:
    """``Decision needed: <action>``, ``Reminder: ...``, ``Escalated: ...``, ``<Decided>: <action>``, or ``3
    decisions needed`` for a digest."""
    if notification.kind == "digest":
        return f"{len(notification.cards)} decisions needed"
    if notification.kind == "decided":
        words = _DECIDED.get(notification.decision or "", (notification.decision or "Decided").capitalize())
        return f"{words}: {notification.action}"
    return f"{_HEADLINES[notification.kind]}: {notification.action}"


def _decided_line(notification: Notification) -> str:
    """Who decided, how and when, for a ``decided`` notification (else ``""``)."""
    if notification.kind != "decided":
        return ""
    line = _DECIDED.get(notification.decision or "", notification.decision or "Decided")
    if notification.decided_by:
        line += f" by {notification.decided_by}"
    if notification.decided_via:
        line += f" via {notification.decided_via}"
    line += f", {_when(notification.at)}"
    if notification.outcome:
        line += f". {notification.outcome}"
    return line


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _where(notification: Notification) -> str:
    return f"Conversation {notification.conversation_id}, suggestion {notification.suggestion_id}"


def _buttons(notification: Notification) -> list[tuple[str, str, str]]:
    """The links that may be buttons, as (name, label, URL): ``accept``, ``dismiss`` and ``open`` first, then the
    others as given; only ``http`` and ``https`` URLs (anything else, ``javascript:`` say, is left out)."""
    links = notification.links
    names = [name for name in _LINK_LABELS if name in links] + [name for name in links if name not in _LINK_LABELS]
    return [
        (name, _LINK_LABELS.get(name) or name.replace("-", " ").replace("_", " ").capitalize(), links[name])
        for name in names
        if urlsplit(links[name]).scheme.lower() in ("http", "https")
    ]


def _one_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace and control characters as single spaces), cut to ``limit`` characters."""
    line = " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# Email -------------------------------------------------------------------------------------------------------


def email_message(notification: Notification, *, sender: str, to: Sequence[str]) -> EmailMessage:
    """The email of ``notification`` from ``sender`` to the addresses ``to``: a plain-text part and an HTML
    alternative (the links as buttons, everything else escaped), a ``Message-ID`` of the notification's id at the
    sender's domain, and ``Auto-Submitted: auto-generated`` so auto-responders do not answer it."""
    domain = email.utils.parseaddr(sender)[1].rpartition("@")[2] or "dial-runtime.invalid"
    message = EmailMessage(policy=email.policy.SMTP)
    message["Subject"] = _subject(notification)
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Date"] = email.utils.formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = f"<{notification.id}@{domain}>"
    message["Auto-Submitted"] = "auto-generated"
    message["X-Dial-Notification"] = notification.id
    message.set_content(_plain_text(notification))
    message.add_alternative(_html(notification), subtype="html")
    return message


def _subject(notification: Notification) -> str:
    if notification.kind == "digest":
        destructive = sum(card.destructive for card in notification.cards)
        marked = f" ({destructive} destructive)" if destructive else ""
        titles = ", ".join(_title(card) for card in notification.cards)
        return _one_line(f"{_headline(notification)}{marked} — {titles}", 200)
    subject = _headline(notification) + (" (destructive)" if notification.destructive else "")
    preview = _one_line(notification.preview, 80)
    return _one_line(f"{subject} — {preview}" if preview else subject, 200)


def _title(card: Notification) -> str:
    """What a card of a digest is called: the domain's preview, else its action."""
    return _one_line(card.preview or card.action, 120)


def _digest_text(digest: Notification) -> str:
    lines = [_headline(digest), ""]
    for card in digest.cards:
        lines.append(f"- {_title(card)}{' (destructive)' if card.destructive else ''}")
        lines.append(f"  {_where(card)}, waiting since {_when(card.at)}.")
        lines += [f"  {label}: {url}" for _, label, url in _buttons(card)]
    lines += ["", *(f"{label}: {url}" for _, label, url in _buttons(digest))]
    return "\n".join(lines).rstrip("\n") + "\n"


def _plain_text(notification: Notification) -> str:
    if notification.kind == "digest":
        return _digest_text(notification)
    lines = [_headline(notification)]
    if notification.destructive:
        lines.append("This action is marked destructive.")
    if notification.kind == "decided":
        lines.append(_decided_line(notification))
    if notification.text:
        lines += ["", "The agent says:", notification.text]
    if notification.preview:
        lines += ["", "Preview:", notification.preview]
    lines += ["", "Payload:", notification.payload_json]
    buttons = _buttons(notification)
    if buttons:
        lines.append("")
        lines += [f"{label}: {url}" for _, label, url in buttons]
    lines += ["", f"{_where(notification)}, {_when(notification.at)}."]
    return "\n".join(lines) + "\n"


_BUTTON_COLOURS = {"accept": "#1f883d", "dismiss": "#6e7781"}


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _html_buttons(notification: Notification) -> str:
    """The notification's links as buttons (the accept of a destructive action in red); ``""`` for none."""
    buttons = []
    for name, label, url in _buttons(notification):
        colour = _BUTTON_COLOURS.get(name, "#0969da")
        if name == "accept" and notification.destructive:
            colour = "#cf222e"
        buttons.append(
            f'<a href="{_e(url)}" style="display:inline-block;padding:10px 18px;margin:0 8px 8px 0;'
            f"border-radius:6px;background:{colour};color:#ffffff;text-decoration:none;font-weight:600"
            f'">{_e(label)}</a>'
        )
    return f'<p style="margin:0 0 16px">{"".join(buttons)}</p>' if buttons else ""


def _html_page(notification: Notification, parts: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{_e(_subject(notification))}</title></head>\n"
        "<body style=\"margin:0;padding:16px;font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;"
        'color:#1f2328;line-height:1.45">\n<div style="max-width:640px;margin:0 auto">\n'
        + "\n".join(parts)
        + "\n</div>\n</body></html>\n"
    )


def _digest_html(digest: Notification) -> str:
    parts = [f'<h1 style="font-size:18px;margin:0 0 12px">{_e(_headline(digest))}</h1>']
    for card in digest.cards:
        mark = (
            ' <strong style="background:#ffebe9;color:#82071e;padding:0 6px;border-radius:4px">'
            "destructive</strong>"
            if card.destructive
            else ""
        )
        parts.append(
            '<div style="border:1px solid #d1d9e0;border-radius:6px;padding:12px;margin:0 0 12px">'
            f'<p style="margin:0 0 4px;font-weight:600">{_e(_title(card))}{mark}</p>'
            f'<p style="color:#59636e;font-size:12px;margin:0 0 8px">{_e(_where(card))}, waiting since '
            f"{_e(_when(card.at))}.</p>{_html_buttons(card)}</div>"
        )
    parts.append(_html_buttons(digest))
    return _html_page(digest, parts)


def _html(notification: Notification) -> str:
    if notification.kind == "digest":
        return _digest_html(notification)
    e = _e
    parts = [f'<h1 style="font-size:18px;margin:0 0 12px">{e(_headline(notification))}</h1>']
    if notification.destructive:
        parts.append(
            '<p style="background:#ffebe9;border:1px solid #ff8182;color:#82071e;padding:8px 12px;'
            'border-radius:6px;margin:0 0 12px"><strong>This action is marked destructive.</strong></p>'
        )
    if notification.kind == "decided":
        parts.append(f'<p style="margin:0 0 12px">{e(_decided_line(notification))}</p>')
    if notification.text:
        parts.append(
            '<p style="margin:0 0 4px;color:#59636e">The agent says:</p>'
            f'<p style="white-space:pre-wrap;margin:0 0 12px">{e(notification.text)}</p>'
        )
    if notification.preview:
        parts.append(
            '<p style="margin:0 0 4px;color:#59636e">Preview:</p>'
            f'<p style="white-space:pre-wrap;margin:0 0 12px">{e(notification.preview)}</p>'
        )
    parts.append(
        '<p style="margin:0 0 4px;color:#59636e">Payload:</p>'
        '<pre style="background:#f6f8fa;padding:12px;border-radius:6px;overflow:auto;font-size:12px;'
        f'margin:0 0 16px">{e(notification.payload_json)}</pre>'
    )
    buttons = _html_buttons(notification)
    if buttons:
        parts.append(buttons)
    parts.append(
        f'<p style="color:#59636e;font-size:12px;margin:0">{e(_where(notification))}, '
        f"{e(_when(notification.at))}.</p>"
    )
    return _html_page(notification, parts)


#: Who gets a notification's email: a mapping from each recipient the notification names (a person, a role) to
#: one address or several, a function of the notification giving the addresses (it may be a coroutine function),
#: or ``None``: the recipients that are addresses already.
RecipientsLike: TypeAlias = (
    "Mapping[str, str | Sequence[str]] | Callable[[Notification], Iterable[str] | Awaitable[Iterable[str]]] | None"
)

#: How many notifications an :class:`SmtpNotifier` remembers the accepting recipients of.
_REMEMBERED = 1024


class SmtpNotifier:
    """Sends each notification as an email (:func:`email_message`) through the SMTP server at ``host:port``.

    ``tls`` is ``"starttls"`` (the default: the server must offer STARTTLS, else the notification fails rather
    than go in clear), ``"ssl"`` (TLS from the first byte, as on port 465) or ``"none"``; ``ssl_context`` verifies
    the server (default: the system's CAs and the host name). ``credentials`` (user, password) log in after TLS is
    up; in clear (``tls="none"``) only to a loopback host, else ``ValueError``. ``timeout`` bounds each socket
    operation, in seconds.

    ``recipients`` resolves the notification's recipients to addresses (:data:`RecipientsLike`); a notification
    none of whose recipients has an address fails with ``ValueError``, one that leaves some out logs a warning.
    A server that takes the message for some addresses and refuses others fails with
    ``smtplib.SMTPRecipientsRefused`` naming those; a retry of the same notification goes only to them. smtplib
    runs in a worker thread.
    """

    def __init__(
        self,
        host: str,
        port: int = 587,
        *,
        sender: str,
        recipients: RecipientsLike = None,
        tls: Literal["starttls", "ssl", "none"] = "starttls",
        ssl_context: ssl.SSLContext | None = None,
        credentials: tuple[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        if tls not in ("starttls", "ssl", "none"):
            raise ValueError(f"SmtpNotifier: tls must be 'starttls', 'ssl' or 'none', got {tls!r}")
        if credentials is not None and tls == "none" and not _loopback(host):
            raise ValueError("SmtpNotifier: credentials go in clear with tls='none'; use 'starttls' or 'ssl'")
        if not email.utils.parseaddr(sender)[1]:
            raise ValueError(f"SmtpNotifier: sender must be an email address, got {sender!r}")
        self.host = host
        self.port = port
        self.sender = sender
        self.recipients = recipients
        self.tls = tls
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._credentials = credentials
        self._accepted: OrderedDict[str, set[str]] = OrderedDict()

    @property
    def label(self) -> str:
        """``smtp://host:port``: the notifier in logs."""
        return f"smtp://{self.host}:{self.port}"

    def __repr__(self) -> str:
        login = "'<hidden>'" if self._credentials else "None"
        return f"SmtpNotifier(host={self.host!r}, port={self.port}, sender={self.sender!r}, credentials={login})"

    async def addresses(self, notification: Notification) -> list[str]:
        """The addresses ``notification`` goes to, each once, in order; ``ValueError`` when there are none."""
        resolve = self.recipients
        unresolved: list[str] = []
        if callable(resolve):
            found = resolve(notification)
            given = list(await found if inspect.isawaitable(found) else found)
        else:
            given = []
            for recipient in notification.recipients:
                if resolve is not None and recipient in resolve:
                    value = resolve[recipient]
                    given += [value] if isinstance(value, str) else list(value)
                elif "@" in recipient:
                    given.append(recipient)
                else:
                    unresolved.append(recipient)
        addresses = list(dict.fromkeys(address.strip() for address in given if _address(address)))
        if not addresses:
            named = ", ".join(notification.recipients) or "none"
            raise ValueError(f"no email address for the notification's recipients ({_one_line(named, 200)})")
        if unresolved:
            logger.warning(
                "notification %s: no email address for %s", notification.id, _one_line(", ".join(unresolved), 200)
            )
        return addresses

    async def notify(self, notification: Notification) -> None:
        """Send the notification's email to the addresses that have not taken it yet."""
        addresses = await self.addresses(notification)
        accepted = self._accepted.get(notification.id, set())
        to = [address for address in addresses if address not in accepted]
        if not to:
            return
        message = email_message(notification, sender=self.sender, to=addresses)
        refused = await anyio.to_thread.run_sync(self._send, message, to)
        self._accepted[notification.id] = accepted | (set(to) - set(refused))
        self._accepted.move_to_end(notification.id)
        while len(self._accepted) > _REMEMBERED:
            self._accepted.popitem(last=False)
        if refused:
            raise smtplib.SMTPRecipientsRefused(refused)

    def _send(self, message: EmailMessage, to: list[str]) -> dict[str, tuple[int, bytes]]:
        """One SMTP session, in a worker thread: the addresses the server refused (the others took it)."""
        context = self.ssl_context or ssl.create_default_context()
        client: smtplib.SMTP
        if self.tls == "ssl":
            client = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
        else:
            client = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        with client:
            if self.tls == "starttls":
                client.starttls(context=context)
            if self._credentials is not None:
                client.login(*self._credentials)
            sender = email.utils.parseaddr(self.sender)[1]
            return client.send_message(message, from_addr=sender, to_addrs=to)


def _address(text: str) -> bool:
    """Whether ``text`` is one address fit for an envelope and a header."""
    return "@" in email.utils.parseaddr(text)[1] and not re.search(r"[\r\n,]", text)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# Webhooks ----------------------------------------------------------------------------------------------------

#: Slack's limits on the parts of a message (characters): a header, a section's text, a button's text.
_SLACK_HEADER, _SLACK_SECTION, _SLACK_BUTTON, _SLACK_TEXT, _SLACK_ACTIONS = 150, 3000, 75, 3000, 25


def _slack_escape(text: str) -> str:
    """``text`` with Slack's control characters (``&``, ``<``, ``>``) as entities: no link or mention can be
    made of it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_fit(text: str, limit: int) -> str:
    """Escaped ``text`` cut to ``limit`` characters (with ``…``), never in the middle of an entity."""
    escaped = _slack_escape(text)
    if len(escaped) <= limit:
        return escaped
    return re.sub(r"&[a-z]*$", "", escaped[: limit - 1]) + "…"


def _slack_buttons(notification: Notification) -> list[dict[str, Any]]:
    """The notification's links as Slack URL buttons (the accept of a destructive action as ``danger``)."""
    buttons = []
    for name, label, url in _buttons(notification)[:_SLACK_ACTIONS]:
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": _slack_fit(label, _SLACK_BUTTON)},
            "url": url,
            "action_id": f"dial-{name}-{notification.id}"[:255],
        }
        if name == "accept":
            button["style"] = "danger" if notification.destructive else "primary"
        buttons.append(button)
    return buttons


#: How many cards a digest shows in Slack: each takes two of the 50 blocks a message may hold.
_SLACK_DIGEST_CARDS = 20


def _slack_digest(digest: Notification) -> dict[str, Any]:
    text = _headline(digest)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _slack_fit(text, _SLACK_HEADER)}}
    ]
    for card in digest.cards[:_SLACK_DIGEST_CARDS]:
        mark = " :warning: *destructive*" if card.destructive else ""
        line = (
            f"*{_slack_escape(_title(card))}*{mark}\n{_slack_escape(_where(card))}, waiting since {_when(card.at)}"
        )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _slack_fit(line, _SLACK_SECTION)}})
        buttons = _slack_buttons(card)
        if buttons:
            blocks.append({"type": "actions", "elements": buttons})
    more = len(digest.cards) - _SLACK_DIGEST_CARDS
    if more > 0:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"and {more} more"}]})
    buttons = _slack_buttons(digest)
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    titles = ", ".join(_title(card) for card in digest.cards)
    return {"text": _slack_fit(f"{text}: {titles}", _SLACK_TEXT), "blocks": blocks}


def slack_message(notification: Notification) -> dict[str, Any]:
    """What a Slack incoming webhook accepts for ``notification``: ``text`` (what Slack shows in the
    notification itself) and ``blocks``: a header, sections for the decision, the agent's words, the preview and
    the payload, a context line, and the links as URL buttons; for a digest, a section and its buttons for each of
    its cards (the first 20). Everything from the agent or the payload is escaped, and each part kept within
    Slack's limits."""
    if notification.kind == "digest":
        return _slack_digest(notification)
    preview = _one_line(notification.preview, 200)
    text = _headline(notification) + (" (destructive)" if notification.destructive else "")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _slack_fit(text, _SLACK_HEADER)}}
    ]

    def section(title: str, body: str, *, code: bool = False) -> None:
        fence = "```" if code else ""
        room = _SLACK_SECTION - len(title) - 1 - 2 * len(fence)
        content = _slack_fit(body.replace("```", "`\u200b`\u200b`"), room)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"{title}\n{fence}{content}{fence}"}})

    marks = []
    if notification.destructive:
        marks.append(":warning: *This action is marked destructive.*")
    if notification.kind == "decided":
        marks.append(_slack_fit(_decided_line(notification), _SLACK_SECTION - 60))
    if marks:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(marks)}})
    if notification.text:
        section("*The agent says*", notification.text)
    if notification.preview:
        section("*Preview*", notification.preview)
    section("*Payload*", notification.payload_json, code=True)
    where = f"{_where(notification)}, {_when(notification.at)}"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _slack_fit(where, 3000)}]})
    buttons = _slack_buttons(notification)
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    summary = f"{text} — {preview}" if preview else text
    return {"text": _slack_fit(f"{summary} ({notification.suggestion_id})", _SLACK_TEXT), "blocks": blocks}


def mask_url(url: str) -> str:
    """``url`` fit for a log: the user part becomes ``***``, the path past its first segment ``/***`` (a webhook
    URL's token is its path: ``https://hooks.slack.com/services/***``), the query ``?***``; scheme, host and port
    stay."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<a URL that does not parse>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = ("***@" if "@" in parts.netloc else "") + host + (f":{port}" if port is not None else "")
    segments = [segment for segment in parts.path.split("/") if segment]
    path = f"/{segments[0]}" + ("/***" if len(segments) > 1 else "") if segments else ""
    return f"{parts.scheme}://{netloc}{path}" + ("?***" if parts.query else "")


#: A webhook body: Slack's (:func:`slack_message`), the notification itself as JSON, or the caller's function.
WebhookShape: TypeAlias = "Literal['slack', 'json'] | Callable[[Notification], Any]"


class WebhookNotifier:
    """POSTs each notification as JSON to ``url`` with httpx.

    ``shape`` is the body: ``"slack"`` (default) what a Slack incoming webhook accepts (:func:`slack_message`),
    ``"json"`` the :class:`Notification` itself (``msgspec.json.decode(body, type=Notification)`` reads it), or a
    function of the notification returning JSON data (for Teams, Discord, ...). Every request carries
    ``Idempotency-Key: <notification id>`` and the ``headers`` given (an ``Authorization``, say); ``timeout``
    bounds it (seconds). A response other than 2xx (redirects are not followed) fails with
    ``httpx.HTTPStatusError``, its message the status and the start of the body, without the URL. ``label``
    names the notifier in logs, by default :func:`mask_url` of ``url``. ``client``: an httpx client to use,
    else each notification opens its own (a client is bound to one event loop; notifications are few).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        shape: WebhookShape = "slack",
        client: httpx.AsyncClient | None = None,
        label: str | None = None,
    ) -> None:
        if not callable(shape) and shape not in ("slack", "json"):
            raise ValueError(f"WebhookNotifier: shape must be 'slack', 'json' or a function, got {shape!r}")
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            raise ValueError(f"WebhookNotifier: the URL must be http or https, got {mask_url(url)}")
        self.url = url
        self.shape = shape
        self.timeout = timeout
        self.label = label or mask_url(url)
        self._headers = {
            name: value for name, value in (headers or {}).items() if name.lower() != "idempotency-key"
        }
        self._client = client

    def __repr__(self) -> str:
        return f"WebhookNotifier({self.label!r}, shape={self.shape!r})"

    def body(self, notification: Notification) -> Any:
        """The JSON data POSTed for ``notification``."""
        if self.shape == "slack":
            return slack_message(notification)
        if self.shape == "json":
            return msgspec.to_builtins(notification)
        assert callable(self.shape)
        return self.shape(notification)

    async def notify(self, notification: Notification) -> None:
        """POST the notification; ``httpx.HTTPStatusError`` for a response other than 2xx."""
        await self.post(self.body(notification), key=notification.id)

    async def post(self, body: Any, *, key: str) -> None:
        """POST ``body`` (JSON data) under the idempotency key ``key``, as every notification is POSTed (a
        door's pushes go this way too); ``httpx.HTTPStatusError`` for a response other than 2xx."""
        content = msgspec.json.encode(body, enc_hook=str)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "dial-runtime",
            **self._headers,
            "Idempotency-Key": key,
        }
        if self._client is not None:
            response = await self._client.post(self.url, content=content, headers=headers, timeout=self.timeout)
        else:
            async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as client:
                response = await client.post(self.url, content=content, headers=headers)
        if not response.is_success:
            said = _one_line(response.text, 200)
            raise httpx.HTTPStatusError(
                f"HTTP {response.status_code}" + (f": {said}" if said else ""),
                request=response.request,
                response=response,
            )


# Delivery ----------------------------------------------------------------------------------------------------


def is_permanent(error: Exception) -> bool:
    """Whether another try could not deliver what failed with ``error``, so it is not retried.

    Permanent: an HTTP answer 3xx or 4xx other than 408 and 429 (the receiver judged the request itself: a wrong
    or revoked URL, a refused body, missing rights; the same request gets the same answer, while 408 and 429 ask
    to come back later), an SMTP reply 5xx (every refused recipient 5xx), a server without STARTTLS, a TLS
    certificate that does not verify, a URL scheme httpx cannot send, and ``ValueError``/``TypeError`` (a
    notification or a configuration that cannot be sent). Everything else is retried: 5xx and SMTP 4xx replies,
    connections refused or cut, timeouts, and whatever a notifier raises that is not known to be final.
    """
    if isinstance(error, httpx.HTTPStatusError):
        status = error.response.status_code
        return status < 500 and status not in (408, 429)
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        return all(500 <= code < 600 for code, _ in error.recipients.values())
    if isinstance(error, smtplib.SMTPResponseException):
        return 500 <= error.smtp_code < 600
    return isinstance(
        error,
        (
            smtplib.SMTPNotSupportedError,
            ssl.SSLCertVerificationError,
            httpx.UnsupportedProtocol,
            ValueError,
            TypeError,
        ),
    )


def _reason(error: Exception) -> str:
    """Why a try failed, on one line, without any URL's secrets."""
    if isinstance(error, httpx.HTTPStatusError):
        text = str(error)
    elif isinstance(error, smtplib.SMTPResponseException):
        said = (
            error.smtp_error.decode(errors="replace") if isinstance(error.smtp_error, bytes) else error.smtp_error
        )
        text = f"SMTP {error.smtp_code} {said}"
    elif isinstance(error, smtplib.SMTPRecipientsRefused):
        refused = (
            f"{address} ({code} {said.decode(errors='replace')})"
            for address, (code, said) in error.recipients.items()
        )
        text = "refused recipients: " + ", ".join(refused)
    else:
        said = str(error)
        text = f"{type(error).__name__}: {said}" if said else type(error).__name__
    return _one_line(_URL.sub(lambda found: mask_url(found.group()), text), 300)


_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


class _Failed(Exception):
    """A notifier's failed try, as the retry policy and its instrumentation see it: the error's one line (URLs
    masked, so no log names a webhook's secret path), and the error itself on ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(_reason(error))
        self.error = error

    def __repr__(self) -> str:
        return f"NotifierFailed({self.args[0]!r})"


def _retry_after(error: Exception) -> float | None:
    """The wait an HTTP answer asks for (``Retry-After``), if any."""
    if isinstance(error, httpx.HTTPStatusError):
        return parse_retry_after(error.response.headers)
    return None


class Undelivered(msgspec.Struct, frozen=True, kw_only=True):
    """A notification one notifier failed to deliver for good: the ``notifier`` (its label), the ``attempts``
    made, the last ``error`` (one line, URLs masked), and whether it was ``permanent`` (refused, not retried) or
    the attempts ran out."""

    notification_id: str
    notifier: str
    attempts: int
    error: str
    permanent: bool


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """What became of a notification: the notifiers that ``delivered`` it (their labels, in the dispatcher's
    order) and those that did not (:class:`Undelivered`)."""

    notification_id: str
    delivered: tuple[str, ...] = ()
    undelivered: tuple[Undelivered, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every notifier delivered it."""
        return not self.undelivered


class Notifications:
    """Delivers each notification to every notifier, each on its own, and never raises into the caller.

    A notifier that fails is tried again, up to ``attempts`` tries in all, unless ``permanent(error)`` says no
    try could succeed (:func:`is_permanent`). Before retry *n* (1, 2, ...) it waits ``min(max_backoff, backoff *
    2 ** (n - 1))`` seconds and a random part of up to ``backoff`` (exponential backoff with jitter, so notifiers
    failing together do not retry together; never more than ``max_backoff``), or what a 429 or 503 answer's
    ``Retry-After`` asks, up to ``max_backoff``: the runtime's one retry policy (:mod:`dial_runtime._retry`).
    ``attempt_timeout`` bounds each try (a notifier that hangs fails with ``TimeoutError``; a worker thread
    runs on to its own timeout). Each failed try is one WARNING line on the ``dial_runtime.notify`` logger, each
    notification given up one ERROR line; neither holds a secret (URLs are masked, credentials never shown).

    :meth:`send` returns what became of the notification (:class:`Delivery`), and :attr:`undelivered` keeps what
    failed for good (the last ``keep``). Only the caller's cancellation goes through. Delivery is at least once: a
    try whose answer was lost is made again, with the same notification id for the receiver to deduplicate. The
    decision path should not wait for the retries: start :meth:`send` in a task group of its own.
    """

    def __init__(
        self,
        notifiers: Iterable[Notifier],
        *,
        attempts: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        attempt_timeout: float | None = 120.0,
        permanent: Callable[[Exception], bool] = is_permanent,
        keep: int = 1000,
    ) -> None:
        try:
            self.retry = RetryPolicy(
                attempts=attempts, backoff=backoff, max_backoff=max_backoff, max_asked=max_backoff
            )
        except ValueError as error:
            raise ValueError(f"Notifications: {error}") from None
        self.notifiers: tuple[Notifier, ...] = tuple(notifiers)
        self.attempt_timeout = attempt_timeout
        self.permanent = permanent
        self.undelivered: deque[Undelivered] = deque(maxlen=keep)

    async def send(self, notification: Notification) -> Delivery:
        """Deliver ``notification`` to every notifier at once, each retried on its own; what became of it."""
        outcomes: list[Undelivered | None] = [None] * len(self.notifiers)

        async def deliver(index: int, notifier: Notifier) -> None:
            outcomes[index] = await self._deliver(notifier, notification)

        async with anyio.create_task_group() as group:
            for index, notifier in enumerate(self.notifiers):
                group.start_soon(deliver, index, notifier)
        failed = tuple(outcome for outcome in outcomes if outcome is not None)
        self.undelivered.extend(failed)
        delivered = tuple(
            _label(notifier) for notifier, outcome in zip(self.notifiers, outcomes, strict=True) if outcome is None
        )
        return Delivery(notification_id=notification.id, delivered=delivered, undelivered=failed)

    async def _deliver(self, notifier: Notifier, notification: Notification) -> Undelivered | None:
        """Try ``notifier`` until it delivers (``None``) or fails for good (what failed)."""
        label = _label(notifier)
        about = (
            f"notification {notification.id} ({notification.kind} {_one_line(notification.suggestion_id, 60)}"
            f" in {_one_line(notification.conversation_id, 120)}) to {label}"
        )
        return await self.attempt(
            lambda: notifier.notify(notification), key=notification.id, about=about, label=label
        )

    async def attempt(
        self, send: Callable[[], Awaitable[None]], *, key: str, about: str, label: str
    ) -> Undelivered | None:
        """``send()`` tried until it delivers (``None``) or fails for good (what failed), by this delivery's
        policy (its retries, its timeout per try, its logging): how each notification reaches each notifier, and
        how a door delivers what it sends on its own (``key`` names what is delivered, ``about`` it in the logs,
        ``label`` the receiver)."""

        def retrying(tried: int, failed: BaseException, wait: str) -> None:
            logger.warning(
                "%s failed (attempt %d of %d): %s; retrying in %s", about, tried, self.retry.attempts, failed, wait
            )

        def retried(failed: BaseException) -> bool:
            return isinstance(failed, _Failed) and not self.permanent(failed.error)

        def asked(failed: BaseException) -> float | None:
            return _retry_after(failed.error) if isinstance(failed, _Failed) else None

        tries = self.retry.tries(retried, asked=asked, on_retry=retrying)
        try:
            async for attempt in tries:
                with attempt:
                    try:
                        with anyio.fail_after(self.attempt_timeout):
                            await send()
                    except Exception as error:
                        raise _Failed(error) from None
        except _Failed as failed:
            permanent = self.permanent(failed.error)
            why = "refused, not retried" if permanent else f"gave up after {tries.made} attempts"
            reason = str(failed)
            logger.error("%s not delivered (%s): %s", about, why, reason)
            return Undelivered(
                notification_id=key,
                notifier=label,
                attempts=tries.made,
                error=reason,
                permanent=permanent,
            )
        return None


def _label(notifier: object) -> str:
    """How a notifier is named in logs: its ``label`` (URLs in it masked), else its class's name."""
    label = getattr(notifier, "label", None)
    if not isinstance(label, str) or not label:
        return type(notifier).__name__
    return _one_line(_URL.sub(lambda found: mask_url(found.group()), label), 200)
