"""Telling people what happened to cards: which notifications a change of a conversation's cards gives, for whom,
with which decision links, and sending them.

One :class:`Announcer` serves the web surface (the runs, the links' decisions, the deadlines its lifespan fires)
and any process that fires deadlines on its own (a ``dial-runtime worker``), so that a reminder, an escalation or
an expiry is told the same way whoever fires it. What changed is read from the log's projection, never from event
types: a card that starts waiting (or waits on another payload) gives ``waiting``, one newly reminded ``reminder``,
one escalated to other deciders ``escalated``, one decided ``decided``.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.abc

from ..driver import Conversation
from ..ports import StorePort
from ..runtime.events import Event, InformDeltaEvent
from ..views.person import Card, Item, project
from .linking import decision_links
from .links import DEFAULT_VALID_FOR, Keyring
from .notify import Notification, NotificationKind, Notifications

__all__ = ["FLUSH_GRACE", "Announcer", "CardMark", "Recipients", "marks"]

logger = logging.getLogger("dial_runtime.web")

#: ``recipients(conversation_id, card)``: the principals to tell of a card (plain or ``async``).
Recipients = Callable[[str, Card], Sequence[str] | Awaitable[Sequence[str]]]

#: How long ``recipients`` may take to name whom to tell, in seconds.
RECIPIENTS_TIMEOUT = 10.0

#: How long the digests gathered may take to be sent when an announcer closes, in seconds (a notifier that takes
#: longer is given up on).
FLUSH_GRACE = 10.0


@dataclass(frozen=True)
class CardMark:
    """What a card was, for telling what changed: waiting or not, on which payload, after how many decisions,
    reminded or not, escalated to whom."""

    waiting: bool
    digest: str
    decided: int
    reminded: bool = False
    escalated_to: tuple[str, ...] = ()


def marks(items: Iterable[Item]) -> dict[str, CardMark]:
    """Each card of ``items`` (a projection's) as :class:`CardMark` says it is."""
    return {
        item.id: CardMark(
            waiting=item.waiting,
            digest=item.digest,
            decided=len(item.decisions),
            reminded=item.reminded,
            escalated_to=item.escalated_to,
        )
        for item in items
        if isinstance(item, Card)
    }


class Announcer:
    """The notifications of what happens to cards, sent through ``notifications``.

    ``recipients(conversation_id, card)`` names whom to tell, as principals: each gets a ``waiting``,
    ``reminder`` or ``escalated`` notification of their own, with decision links only they can use when there
    are ``links`` (a :class:`~dial_runtime.links.Keyring`) and a ``public_url`` (where people reach the web
    surface that serves ``/decide``); ``decided`` goes once to them all. Without ``recipients``, one
    notification with no recipients and no links. Building a notification never raises (what cannot be built is
    logged and left out), and sending never reaches the caller (each notifier retries as
    :class:`~dial_runtime.notify.Notifications` does).

    With ``digest_after`` (seconds), a person is not told of each card that starts waiting for them as it does:
    the ``waiting`` notifications of the next ``digest_after`` seconds are gathered, and the person gets one
    digest of them all (:meth:`~dial_runtime.notify.Notification.digest_of`, with a link to the inbox), or the one
    notification when it is only one. A card this announcer sees decided meanwhile is left out. Reminders,
    escalations and decisions still go at once. What is gathered lives in this process until it is sent:
    :meth:`flush` sends it at once (leaving the ``async with`` does, as the web surface's shutdown does); a
    process that dies loses it, as it loses a notification it had not sent yet (the inbox still lists every card).

    Used as ``async with``, it holds a task group that :meth:`announcing`'s conversations send in, so a deadline
    worker is never held up by a slow notifier; leaving it sends what is gathered and waits for what is being
    sent.
    """

    def __init__(
        self,
        notifications: Notifications,
        *,
        recipients: Recipients | None = None,
        links: Keyring | None = None,
        public_url: str | None = None,
        digest_after: float | None = None,
    ) -> None:
        if digest_after is not None and not (
            isinstance(digest_after, (int, float)) and math.isfinite(digest_after) and digest_after > 0
        ):
            raise ValueError(f"Announcer: digest_after is a positive number of seconds, not {digest_after!r}")
        self.notifications = notifications
        self.recipients = recipients
        self.links = links
        self.public_url = public_url
        self.digest_after = digest_after
        self.background: anyio.abc.TaskGroup | None = None  # where announcing()'s conversations send
        self._gathered: dict[str, dict[str, Notification]] = {}  # for a digest: by person, by notification id

    async def __aenter__(self) -> Announcer:
        self.background = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        group = self.background
        assert group is not None
        with anyio.move_on_after(FLUSH_GRACE, shield=True):
            await self.flush()
        self.background = None
        group.cancel_scope.cancel()  # the digests' timers: what they waited for is sent
        return await group.__aexit__(kind, error, trace)

    async def announcements(
        self, thread: str, before: Mapping[str, CardMark], now: Iterable[Item]
    ) -> list[Notification]:
        """The notifications of what changed on the cards of ``thread`` (among the projection's items ``now``)
        since ``before``: a ``decided`` for each card decided that no longer waits, a ``waiting`` for each card
        waiting that did not (or not on this payload), a ``reminder`` and an ``escalated`` for a waiting card newly
        reminded or escalated."""
        built: list[Notification] = []
        for card in now:
            if not isinstance(card, Card):
                continue
            was = before.get(card.id)
            if card.waiting and (was is None or not was.waiting or was.digest != card.digest):
                built += await self._notifications("waiting", thread, card)
            elif card.waiting and was is not None:
                if card.reminded and not was.reminded:
                    built += await self._notifications("reminder", thread, card)
                if card.escalated_to != was.escalated_to:
                    built += await self._notifications("escalated", thread, card)
            elif card.decision is not None and len(card.decisions) > (was.decided if was else 0):
                built += await self._notifications("decided", thread, card)
        return built

    async def deliver(self, outbox: Sequence[Notification]) -> None:
        """Send what ``outbox`` holds to every notifier, all at once; with ``digest_after``, gather each person's
        ``waiting`` notifications for their digest instead (and drop from it a card ``outbox`` says was
        decided)."""
        if self.digest_after is not None and self.background is not None:
            outbox = self._gather(outbox)
        await self._send(outbox)

    async def _send(self, outbox: Sequence[Notification]) -> None:
        if not outbox:
            return
        async with anyio.create_task_group() as group:
            for notification in outbox:
                group.start_soon(self.notifications.send, notification)

    def _gather(self, outbox: Sequence[Notification]) -> list[Notification]:
        """What of ``outbox`` goes now: not the ``waiting`` notification of one person, which is gathered for
        their digest (a timer starts with the first)."""
        now: list[Notification] = []
        for notification in outbox:
            if notification.kind == "decided":
                decided = (notification.conversation_id, notification.suggestion_id)
                for gathered in self._gathered.values():
                    for ident in [
                        i for i, n in gathered.items() if (n.conversation_id, n.suggestion_id) == decided
                    ]:
                        del gathered[ident]
            if notification.kind != "waiting" or len(notification.recipients) != 1:
                now.append(notification)
                continue
            person = notification.recipients[0]
            window = self._gathered.get(person)
            if window is None:
                window = self._gathered[person] = {}
                assert self.background is not None and self.digest_after is not None
                self.background.start_soon(self._digest_later, person, window, self.digest_after)
            window[notification.id] = notification
        return now

    async def _digest_later(self, person: str, window: dict[str, Notification], seconds: float) -> None:
        """Send ``person``'s digest of ``window`` once ``seconds`` have passed, unless it was sent already (a
        :meth:`flush`): a later window has a timer of its own."""
        await anyio.sleep(seconds)
        if self._gathered.get(person) is window:
            await self._send(self._digests([person]))

    async def flush(self) -> None:
        """Send every digest gathered so far now (nothing without ``digest_after``)."""
        await self._send(self._digests(list(self._gathered)))

    def _digests(self, people: Sequence[str]) -> list[Notification]:
        """The digest of each of ``people`` (the one notification, when only one was gathered), taken out of what
        is gathered."""
        inbox = {"inbox": f"{self.public_url.rstrip('/')}/inbox"} if self.public_url else {}
        sent = []
        for person in people:
            waiting = list(self._gathered.pop(person, {}).values())
            if len(waiting) == 1:
                sent.append(waiting[0])
            elif waiting:
                sent.append(Notification.digest_of(person, sorted(waiting, key=lambda each: each.at), links=inbox))
        return sent

    def announcing(
        self, opener: Callable[[str], Awaitable[Conversation]], store: StorePort
    ) -> Callable[[str], Awaitable[Conversation]]:
        """``opener`` (what a deadline scheduler opens conversations with, on ``store``), whose conversations
        announce each
        suggestion they expire (its outcome) as ``decided``, and each reminder and escalation they fire as
        ``reminder`` and ``escalated`` (``recipients`` sees the card's ``escalated_to`` to choose whom), sent in
        :attr:`background` (the ``async with``'s task group, or the web surface's lifespan's)."""

        async def open_conversation(conversation_id: str) -> Conversation:
            conversation = await opener(conversation_id)
            # The log's projection before the call, fed each entry up to each event the call shows (what the store
            # holds): the cards that changed are announced as the panel's runs announce theirs.
            stored = await store.read(conversation_id)
            watched = project(stored)
            fed = [len(stored)]
            known = marks(watched.items)

            def seen(event: Event | InformDeltaEvent) -> None:
                log = conversation.log
                at = next((n for n in range(fed[0], len(log)) if log[n].event is event), None)
                if at is None:  # the text of a streamed reply, which is not on the log
                    return
                changed = marks(watched.feed_all(log[fed[0] : at + 1]))
                fed[0] = at + 1
                group = self.background
                if group is None or not changed:
                    return
                before = {ident: known[ident] for ident in changed if ident in known}
                known.update(changed)
                cards = [card for card in (watched.card(ident) for ident in changed) if card is not None]
                group.start_soon(self._announce, conversation_id, before, cards)

            conversation.on_event = seen
            return conversation

        return open_conversation

    async def _announce(self, thread: str, before: Mapping[str, CardMark], cards: Iterable[Item]) -> None:
        await self.deliver(await self.announcements(thread, before, cards))

    async def _notifications(self, kind: NotificationKind, thread: str, card: Card) -> list[Notification]:
        """The notifications of ``kind`` for ``card``: one per recipient for ``waiting``, ``reminder`` and
        ``escalated`` (each with links of their own), one for them all for ``decided``; one with no recipients
        without ``recipients``."""
        try:
            people: Sequence[str] = ()
            if self.recipients is not None:
                with anyio.fail_after(RECIPIENTS_TIMEOUT):
                    named = self.recipients(thread, card)
                    if inspect.isawaitable(named):
                        named = await named
                if isinstance(named, str):
                    raise TypeError("recipients(conversation_id, card) returns a list of principals, not one")
                people = [str(each) for each in named]
            if kind == "decided" or not people:
                occasion = card.digest if kind in ("reminder", "escalated") else None  # each comes once to a card
                return [Notification.from_card(kind, thread, card, recipients=people, occasion=occasion)]
            return [
                Notification.from_card(
                    kind,
                    thread,
                    card,
                    recipients=[person],
                    links=self._links_for(thread, card, person),
                    occasion=f"{card.digest} for {person}",
                )
                for person in people
            ]
        except Exception:
            logger.exception("the %s notification of %r in %r could not be built", kind, card.id[:60], thread)
            return []

    def _links_for(self, thread: str, card: Card, person: str) -> dict[str, str]:
        """The decision links of a waiting card for ``person``, when there are links and a public URL."""
        keyring, base = self.links, self.public_url
        if keyring is None or base is None or keyring.current is None:
            return {}
        offered = ("dismiss",) if card.issue is not None else ("accept", "dismiss")
        every = ("dismiss", "edit") if card.issue is not None else ("accept", "dismiss", "edit")
        return decision_links(
            keyring,
            base,
            thread,
            card,
            decider=person,
            decisions=offered,
            open_decisions=every,
            valid_for=DEFAULT_VALID_FOR,
        )
