"""Digests: a person told of several cards that started waiting for them in one message, not one each. The digest's
record and id, its email and Slack renderings (everything untrusted escaped, within Slack's limits), the
announcer that gathers each person's cards for ``digest_after`` seconds (on trio's virtual clock), and a real SMTP
server receiving one mail for them all."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
import trio.testing

from dial_runtime.decisions.announce import Announcer
from dial_runtime.decisions.notify import Notification, Notifications, email_message, slack_message
from dial_runtime.views.person import Card

from .test_notify import Html
from .test_notify_servers import Mailbox, block_kit_problems, smtp, smtp_server

pytestmark = pytest.mark.anyio

SHOWN_AT = 1_700_000_000.0
INBOX = {"inbox": "https://desk.example.org/inbox"}


def card(number: int, *, destructive: bool = False, preview: str | None = None) -> Card:
    return Card(
        id=f"sg-{number}",
        action="refund",
        preview=preview if preview is not None else f"Refund {number}0 to bo",
        destructive=destructive,
        payload={"amount": number * 10},
        seq=number,
        time=SHOWN_AT + number,
    )


def waiting(number: int, person: str = "ana", **options: Any) -> Notification:
    """The waiting notification of card ``number`` in conversation ``c-<number>``, for ``person``, with links."""
    links = {
        "accept": f"https://desk.example.org/decide/{number}/accept",
        "dismiss": f"https://desk.example.org/decide/{number}/dismiss",
        "open": f"https://desk.example.org/?thread=c-{number}",
    }
    return Notification.from_card(
        "waiting",
        f"c-{number}",
        card(number, **options),
        links=links,
        recipients=(person,),
        occasion=f"for {person}",
    )


def test_a_digest_holds_its_cards_and_its_id_follows_from_them() -> None:
    cards = [waiting(1), waiting(2, destructive=True)]
    digest = Notification.digest_of("ana", cards, links=INBOX, at=SHOWN_AT + 60)
    assert (digest.kind, digest.recipients, digest.cards, digest.destructive) == (
        "digest",
        ("ana",),
        tuple(cards),
        True,
    )
    assert digest.id == Notification.digest_of("ana", cards[::-1]).id  # the same cards: the same digest
    assert digest.id != Notification.digest_of("bo", cards).id != Notification.digest_of("ana", cards[:1]).id
    assert msgspec.json.decode(msgspec.json.encode(digest), type=Notification) == digest
    decided = Notification.from_card("decided", "c-1", msgspec.structs.replace(card(1), decision="accept"))
    for wrong in ([], [decided]):
        with pytest.raises(ValueError, match="one or more waiting notifications"):
            Notification.digest_of("ana", wrong)
    with pytest.raises(ValueError, match=r"a digest: digest_of\(\)"):
        Notification.from_card("digest", "c-1", card(1))  # type: ignore[arg-type]


def test_a_digest_mail_lists_every_card_with_its_own_buttons_everything_escaped() -> None:
    cards = [waiting(1), waiting(2, destructive=True, preview="Refund <b>all</b> & <script>alert(1)</script>")]
    digest = Notification.digest_of("ana", cards, links=INBOX)
    message = email_message(digest, sender="Desk <desk@example.org>", to=["ana@example.org"])
    assert message["Subject"] == (
        "2 decisions needed (1 destructive) — Refund 10 to bo, Refund <b>all</b> & <script>alert(1)</script>"
    )
    assert message["Message-ID"] == f"<{digest.id}@example.org>"
    plain, page = (message.get_body((kind,)) for kind in ("plain", "html"))
    assert plain is not None and page is not None
    text = plain.get_content()
    assert text.startswith("2 decisions needed\n\n- Refund 10 to bo\n  Conversation c-1, suggestion sg-1, waiting")
    assert "- Refund <b>all</b> & <script>alert(1)</script> (destructive)" in text
    for number in (1, 2):
        for name, label in (("accept", "Accept"), ("dismiss", "Dismiss"), ("open", "Open")):
            assert f"  {label}: {cards[number - 1].links[name]}" in text
    assert text.rstrip().endswith("Inbox: https://desk.example.org/inbox")
    markup = page.get_content()
    parsed = Html(markup)
    assert [label for _, label in parsed.links] == [
        "Accept",
        "Dismiss",
        "Open",
        "Accept",
        "Dismiss",
        "Open",
        "Inbox",
    ]
    assert "script" not in parsed.tags and "<b>all" not in markup
    assert "Refund &lt;b&gt;all&lt;/b&gt; &amp; &lt;script&gt;alert(1)&lt;/script&gt;" in markup


def test_a_digest_in_slack_is_one_message_within_its_limits() -> None:
    few = slack_message(Notification.digest_of("ana", [waiting(1), waiting(2, destructive=True)], links=INBOX))
    assert block_kit_problems(few) == []
    assert few["text"] == "2 decisions needed: Refund 10 to bo, Refund 20 to bo"
    buttons = [element for block in few["blocks"] if block["type"] == "actions" for element in block["elements"]]
    assert [(button["text"]["text"], button.get("style")) for button in buttons] == [
        ("Accept", "primary"),
        ("Dismiss", None),
        ("Open", None),
        ("Accept", "danger"),
        ("Dismiss", None),
        ("Open", None),
        ("Inbox", None),
    ]
    many = slack_message(Notification.digest_of("ana", [waiting(number) for number in range(1, 31)], links=INBOX))
    assert block_kit_problems(many) == []  # 50 blocks at most: the first 20 cards, and how many more
    assert {"type": "context", "elements": [{"type": "mrkdwn", "text": "and 10 more"}]} in many["blocks"]


class Told:
    """A notifier that keeps what it is told (the announcer's own port; the SMTP test below uses a real server)."""

    def __init__(self) -> None:
        self.told: list[Notification] = []

    async def notify(self, notification: Notification) -> None:
        self.told.append(notification)


@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_the_announcer_gathers_each_persons_cards_into_one_digest(anyio_backend: Any) -> None:
    told = Told()
    announcer = Announcer(Notifications([told]), public_url="https://desk.example.org/", digest_after=300)
    async with announcer:
        await announcer.deliver([waiting(1), waiting(2, "bo"), waiting(3)])
        await anyio.sleep(100)
        decided = Notification.from_card("decided", "c-3", msgspec.structs.replace(card(3), decision="dismiss"))
        await announcer.deliver([waiting(4), decided, waiting(5)])  # the decided card leaves ana's digest
        assert told.told == [decided]  # nothing else yet: the digests wait for their time
        await anyio.sleep(199)
        assert told.told == [decided]
        await anyio.sleep(2)
        by_person = {notification.recipients: notification for notification in told.told[1:]}
        digest = by_person[("ana",)]
        assert digest.kind == "digest" and digest.links == {"inbox": "https://desk.example.org/inbox"}
        assert [each.suggestion_id for each in digest.cards] == ["sg-1", "sg-4", "sg-5"]
        assert by_person[("bo",)] == waiting(2, "bo")  # one card: the notification itself
        await announcer.deliver([waiting(6)])  # a new window begins with the next card
    assert told.told[-1] == waiting(6)  # leaving sends what is gathered, at once
    assert len(told.told) == 4


@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_without_a_digest_or_a_task_group_each_card_is_told_at_once(anyio_backend: Any) -> None:
    told = Told()
    await Announcer(Notifications([told]), digest_after=60).deliver([waiting(1), waiting(2)])  # not entered
    assert [each.kind for each in told.told] == ["waiting", "waiting"]
    told.told.clear()
    async with Announcer(Notifications([told])) as announcer:
        await announcer.deliver([waiting(1), waiting(2)])
    assert [each.kind for each in told.told] == ["waiting", "waiting"]
    for wrong in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="digest_after is a positive number of seconds"):
            Announcer(Notifications([told]), digest_after=wrong)


@pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
async def test_a_digest_arrives_as_one_mail_over_smtp(anyio_backend: str) -> None:
    mailbox = Mailbox()
    with smtp_server(mailbox) as port, anyio.fail_after(30):
        notifier = smtp(port, recipients={"ana": "ana@example.org"})
        async with Announcer(
            Notifications([notifier]), public_url="https://desk.example.org", digest_after=0.2
        ) as announcer:
            await announcer.deliver([waiting(number) for number in (1, 2, 3)])
            while not mailbox.messages:
                await anyio.sleep(0.05)
    ((_, rcpt_tos, message),) = mailbox.messages
    assert rcpt_tos == ["ana@example.org"]
    assert message["Subject"] == "3 decisions needed — Refund 10 to bo, Refund 20 to bo, Refund 30 to bo"
    body = message.get_body(("plain",))
    assert body is not None and body.get_content().count("  Accept: https://desk.example.org/decide/") == 3


@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_a_flush_sends_at_once_and_the_next_window_keeps_its_own_time(anyio_backend: Any) -> None:
    told = Told()
    async with Announcer(Notifications([told]), digest_after=300) as announcer:
        await announcer.deliver([waiting(1), waiting(2)])
        await anyio.sleep(100)
        await announcer.flush()
        assert [each.kind for each in told.told] == ["digest"]
        await announcer.deliver([waiting(3), waiting(4)])  # a new window, from now
        await anyio.sleep(250)  # the first window's timer is past: it sends nothing of the second
        assert len(told.told) == 1
        await anyio.sleep(51)
        assert [each.suggestion_id for each in told.told[1].cards] == ["sg-3", "sg-4"]
