"""The inbox: every decision and answer waiting in a store, across its conversations, for whoever must give it.

:class:`Inbox` reads the read model the store keeps beside its logs (:mod:`dial_runtime.views.inbox`): one
indexed query however many conversations the store holds. The read model is written with the appends that change
it, in their transaction, from the conversations' folded state (:func:`~dial_runtime.views.inbox.waiting_cards`);
:meth:`Inbox.rebuild` rewrites it from the logs (a store from before the inbox, or rows lost), and
:meth:`Inbox.differences` says where it and the logs disagree (never, unless something wrote the table behind the
runtime's back).

:func:`decide_each` takes several decisions at once (an inbox's bulk accept or dismiss): each is checked and
recorded on its own, as one ``decide`` would be (the digest of what the person was shown, the approval policy,
the deadline), and one that no longer holds is refused alone, with its reason, while the others go through.
:func:`hold_card` claims, releases or assigns a card, every refusal an outcome a page can show.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, TypeVar, cast

import anyio
import msgspec

from ..driver.built import AgentOnFirstUse
from ..driver.conversation import CLAIM_SECONDS
from ..errors import (
    AlreadyDecided,
    ClaimRefused,
    ConversationBusy,
    DialError,
    LinkRefused,
    LogError,
    NotWaiting,
    PayloadChanged,
)
from ..ports import StorePort
from ..runtime.records import Accept, Dismiss, Suggestion
from ..runtime.state import fold_log
from ..views.inbox import InboxStorePort, WaitingCard, WaitingQuery, card_from_row, stored_rows, waiting_cards
from ..views.person import approval_refused, project

if TYPE_CHECKING:
    from ..driver.conversation import Conversation

__all__ = [
    "BulkChoice",
    "BulkOutcome",
    "CardHolding",
    "HoldingOutcome",
    "Inbox",
    "InboxDifference",
    "Rebuilt",
    "decide_each",
    "hold_card",
    "keeps_inbox",
    "logged_cards",
]

#: How long :meth:`Inbox.rebuild`, :func:`decide_each` and :func:`hold_card` wait for a conversation another
#: worker holds before they report it busy.
BUSY_WAIT = 10.0

_Done = TypeVar("_Done")


def keeps_inbox(store: object) -> bool:
    """Whether ``store`` keeps the inbox's read model (the in-process, SQLite and PostgreSQL stores do)."""
    return callable(getattr(store, "keep_waiting", None)) and callable(getattr(store, "waiting", None))


def logged_cards(conversation_id: str, entries: Iterable[object]) -> tuple[WaitingCard, ...]:
    """What waits in the conversation whose log is ``entries`` (:class:`~dial_runtime.LogError` for a log no run
    of the runtime could have written)."""
    from ..runtime.state import ConversationState

    state = ConversationState()
    fold_log(entries, state)
    return waiting_cards(conversation_id, state)


class Rebuilt(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`Inbox.rebuild` did: the conversations whose rows it rewrote and the cards they hold now; those
    another worker held all along (``busy``, rewritten by that worker's next append anyway) and those whose log
    no run could have written (``refused``, id and why; their rows are left as they were)."""

    conversations: int = 0
    cards: int = 0
    busy: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()


class InboxDifference(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation whose rows in the read model (``kept``) are not what its log says waits (``logged``)."""

    conversation: str
    logged: tuple[WaitingCard, ...]
    kept: tuple[WaitingCard, ...]


class Inbox:
    """Every waiting card of ``store`` (a :class:`~dial_runtime.views.inbox.InboxStorePort`; ``TypeError`` for
    a store that keeps no inbox). ``clock`` tells the time overdue is judged at."""

    def __init__(self, store: StorePort, *, clock: Callable[[], float] = time.time) -> None:
        if not keeps_inbox(store):
            raise TypeError(
                f"{type(store).__name__} keeps no inbox: the in-process, SQLite and PostgreSQL stores do"
            )
        self.store = cast("InboxStorePort", store)
        self.clock = clock

    async def waiting(
        self,
        *,
        decider: str | None = None,
        roles: Collection[str] | None = None,
        overdue: bool = False,
        action: str | None = None,
        conversation: str | None = None,
        limit: int | None = None,
    ) -> list[WaitingCard]:
        """The waiting cards, those with the nearest deadline first (none last), then the longest waiting.

        ``decider`` and ``roles``: only the cards that person, holding those roles, may decide now (as each
        card's approval policy says: no roles named, anyone; else a holder of one; never someone who approved it
        already); either alone filters as both with the other empty. ``overdue``: only those whose deadline has
        passed (they end ``expired`` when their conversation is next touched). ``action``, ``conversation``: only
        those. At most ``limit``. ``ValueError`` for a limit that is not a positive whole number."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"Inbox.waiting: limit is a positive whole number, not {limit!r}")
        filtered = decider is not None or roles is not None
        held = tuple(sorted(roles or ()))
        query = WaitingQuery(
            conversation=conversation,
            action=action,
            overdue_at=self.clock() if overdue else None,
            roles=held if filtered else None,
            not_approved_by=decider,
            limit=limit,
        )
        return [card_from_row(text) for _, text in await self.store.waiting(query)]

    async def rebuild(self, conversation_ids: Iterable[str] | None = None) -> Rebuilt:
        """Rewrite the read model's rows of every conversation (or of those named) from its log, each under the
        conversation's lock, so that no append comes between reading its log and writing its rows; a
        conversation held elsewhere is tried again for up to :data:`BUSY_WAIT` seconds."""
        store = self.store
        if conversation_ids is None:
            ids = sorted({*await store.conversations(), *await store.waiting_conversations()})
        else:
            ids = list(conversation_ids)
        rewritten = cards = 0
        busy: list[str] = []
        refused: list[tuple[str, str]] = []
        for conversation_id in ids:
            try:
                written = await self._rewrite(conversation_id)
            except ConversationBusy:
                busy.append(conversation_id)
                continue
            except LogError as error:
                refused.append((conversation_id, " ".join(str(error).split())))
                continue
            rewritten += 1
            cards += written
        return Rebuilt(conversations=rewritten, cards=cards, busy=tuple(busy), refused=tuple(refused))

    async def _rewrite(self, conversation_id: str) -> int:
        """Rewrite one conversation's rows under its lock (how many cards it holds)."""
        with anyio.move_on_after(BUSY_WAIT):
            pause = 0.01
            while True:
                try:
                    async with self.store.lock(conversation_id):
                        entries = await self.store.read(conversation_id)
                        cards = logged_cards(conversation_id, entries)
                        last = entries[-1].seq if entries else 0
                        if not await self.store.keep_waiting(conversation_id, stored_rows(cards), at_seq=last):
                            raise ConversationBusy(f"conversation {conversation_id!r} was appended to meanwhile")
                        return len(cards)
                except ConversationBusy:
                    await anyio.sleep(pause)
                    pause = min(pause * 2, 0.5)
        raise ConversationBusy(f"conversation {conversation_id!r} was held for {BUSY_WAIT:g} s")

    async def differences(self, conversation_ids: Iterable[str] | None = None) -> list[InboxDifference]:
        """The conversations whose rows in the read model differ from what their logs say waits (a log no run could
        have written counts as waiting for nothing)."""
        store = self.store
        if conversation_ids is None:
            ids = sorted({*await store.conversations(), *await store.waiting_conversations()})
        else:
            ids = list(conversation_ids)
        found = []
        for conversation_id in ids:
            try:
                logged = logged_cards(conversation_id, await store.read(conversation_id))
            except LogError:
                logged = ()
            rows = await store.waiting(WaitingQuery(conversation=conversation_id))
            kept = tuple(card_from_row(text) for _, text in rows)
            if sorted(logged, key=_identity) != sorted(kept, key=_identity):
                found.append(InboxDifference(conversation=conversation_id, logged=logged, kept=kept))
        return found


def _identity(card: WaitingCard) -> tuple[str, str]:
    return (card.conversation, card.id)


class BulkChoice(msgspec.Struct, frozen=True, kw_only=True):
    """One decision of a bulk: ``accept`` or ``dismiss`` the suggestion ``id`` of conversation ``conversation``,
    whose payload the person was shown as ``digest`` (:attr:`WaitingCard.digest`)."""

    conversation: str
    id: str
    decision: Literal["accept", "dismiss"]
    digest: str


#: Why a decision of a bulk was refused (:attr:`BulkOutcome.refused`): the card ended meanwhile, its payload is
#: not the one the person was shown, nothing by that id waits, the approval policy or the application refused the
#: decider, or the conversation stayed held by another call for :data:`BUSY_WAIT` seconds.
BulkRefusal = Literal["already-decided", "payload-changed", "not-waiting", "approval-refused", "forbidden", "busy"]


class BulkOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one :class:`BulkChoice`: taken (``refused`` is ``None``; ``status`` is the status of the
    call it started, ``awaiting`` when the approval policy wants more approvers or other cards of the conversation
    still wait), or refused, in a :data:`BulkRefusal` code and in words (``reason``), with nothing changed."""

    conversation: str
    id: str
    decision: Literal["accept", "dismiss"]
    status: str | None = None
    refused: BulkRefusal | None = None
    reason: str = ""


async def decide_each(
    choices: Sequence[BulkChoice],
    *,
    open_conversation: Callable[[str], Awaitable[Conversation]],
    by: str,
    roles: Collection[str] = (),
    via: str = "inbox",
    may_decide: Callable[[Suggestion], bool] | None = None,
    concurrency: int = 8,
) -> list[BulkOutcome]:
    """Take each of ``choices``, by ``by`` holding ``roles``, through ``via``, as ``Conversation.decide(...,
    shown=choice.digest)`` would one at a time: one outcome per choice, in their order. A choice that no longer
    holds (the card ended or changed meanwhile, or ``may_decide(suggestion)`` is false) is refused alone.

    The conversations are decided ``concurrency`` at a time, each opened by ``open_conversation(id)`` (a
    deadline scheduler's opener: :func:`~dial_runtime.decisions.deadlines.conversation_opener`) and held while its
    choices are taken, one after another; one held by another call is tried again for up to :data:`BUSY_WAIT`
    seconds. Every decision is checked under its conversation's lock, so two bulks over the same cards decide each
    card once, and a bulk sent again after its process died decides only what it had not. ``ValueError`` (nothing
    decided) for a choice named twice, or a ``concurrency`` below 1."""
    if concurrency < 1:
        raise ValueError(f"decide_each: concurrency is at least 1, not {concurrency!r}")
    groups: dict[str, list[int]] = {}
    for position, choice in enumerate(choices):
        named = groups.setdefault(choice.conversation, [])
        if any(choices[other].id == choice.id for other in named):
            raise ValueError(f"decide_each: {choice.id!r} of {choice.conversation!r} is chosen twice")
        named.append(position)
    outcomes: list[BulkOutcome | None] = [None] * len(choices)
    held = tuple(roles)
    queue = iter(groups.items())

    async def worker() -> None:  # takes the conversations in the order the choices first name them
        for conversation_id, positions in queue:
            group = [choices[position] for position in positions]
            for position, outcome in zip(positions, await decide_group(conversation_id, group), strict=True):
                outcomes[position] = outcome

    async def decide_group(conversation_id: str, group: list[BulkChoice]) -> list[BulkOutcome]:
        """The group's outcomes, its conversation held throughout."""

        async def decide_all(conversation: Conversation) -> list[BulkOutcome]:
            return [await decide_one(conversation, choice) for choice in group]

        decided = await _when_held(conversation_id, open_conversation, decide_all)
        if decided is None:
            return [_refused(choice, "busy", _busy_words(conversation_id)) for choice in group]
        return decided

    async def decide_one(conversation: Conversation, choice: BulkChoice) -> BulkOutcome:
        subject = next((each for each in conversation.pending if each.id == choice.id), None)
        if isinstance(subject, Suggestion) and may_decide is not None and not may_decide(subject):
            return _refused(choice, "forbidden", f"{by} may not decide it")
        before = project(conversation.log).card(choice.id)
        decision = Accept() if choice.decision == "accept" else Dismiss()
        try:
            result = await conversation.decide(
                choice.id, decision, by=by, shown=choice.digest, via=via, roles=held
            )
        except AlreadyDecided as error:
            how = _ENDED.get(error.how, error.how)
            return _refused(choice, "already-decided", f"{how} already{f' by {error.by}' if error.by else ''}")
        except PayloadChanged:
            return _refused(choice, "payload-changed", "its payload changed since it was shown: show it again")
        except (ConversationBusy, LinkRefused):
            raise
        except Exception as error:
            after = project(conversation.log).card(choice.id)
            if after is not None and len(after.decisions) > (len(before.decisions) if before else 0):
                # The decision is on the log; the call it started failed after it (an agent that did not answer).
                return BulkOutcome(
                    conversation=choice.conversation, id=choice.id, decision=choice.decision, status="failed"
                )
            if not isinstance(error, DialError):
                raise
            return _refused(choice, "not-waiting", "it does not wait for a decision in this conversation")
        refusal = approval_refused(before, project(conversation.log).card(choice.id))
        if refusal is not None:
            return _refused(choice, "approval-refused", refusal)
        return BulkOutcome(
            conversation=choice.conversation, id=choice.id, decision=choice.decision, status=result.status
        )

    async with anyio.create_task_group() as tasks:
        for _ in range(min(concurrency, len(groups))):
            tasks.start_soon(worker)
    return [outcome for outcome in outcomes if outcome is not None]


async def _when_held(
    conversation_id: str,
    open_conversation: Callable[[str], Awaitable[Conversation]],
    work: Callable[[Conversation], Awaitable[_Done]],
) -> _Done | None:
    """``work(conversation)``, the conversation opened by ``open_conversation`` and held throughout; tried again
    while another call holds it, for up to :data:`BUSY_WAIT` seconds (``None`` when it stayed held). Only the
    wait for the hold is bounded: a decision in progress, and the agent's answer it waits for, are never cut
    short."""
    pause, give_up = 0.01, time.monotonic() + BUSY_WAIT
    while True:
        conversation = await open_conversation(conversation_id)
        try:
            async with conversation.holding():
                return await work(conversation)
        except ConversationBusy:
            if time.monotonic() + pause > give_up:
                return None
        finally:
            if isinstance(conversation.agent, AgentOnFirstUse):  # the agent the opener built, if a call did
                with anyio.CancelScope(shield=True):
                    await conversation.agent.aclose()
        await anyio.sleep(pause)
        pause = min(pause * 2, 0.5)


def _busy_words(conversation_id: str) -> str:
    return f"another call held conversation {conversation_id!r} for {BUSY_WAIT:g} s; try again"


class CardHolding(msgspec.Struct, frozen=True, kw_only=True):
    """A claim (for ``seconds``), a release, or an assignment (to ``person``, or ``role``, or, with neither, to
    nobody) of the suggestion ``id`` of conversation ``conversation``."""

    conversation: str
    id: str
    kind: Literal["claim", "release", "assign"]
    seconds: float = CLAIM_SECONDS
    person: str | None = None
    role: str | None = None


#: Why a claim, release or assignment was refused (:attr:`HoldingOutcome.refused`): a rule of the card's
#: (:data:`~dial_runtime.statemachines.CLAIM_REFUSALS`), the card ended or does not wait, the application refused
#: the person (or the person assigned), or the conversation stayed held by another call.
HoldingRefusal = Literal[
    "unknown-claimant",
    "not-a-decider",
    "already-approved",
    "claimed",
    "not-claimed",
    "assignee-not-a-decider",
    "already-decided",
    "not-waiting",
    "forbidden",
    "busy",
]


class HoldingOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What became of a :class:`CardHolding`: taken (``refused`` is ``None``; a claim says ``until`` when it
    ends, seconds since the epoch), or refused in a :data:`HoldingRefusal` code and in words (``reason``; a card
    someone else claimed names ``holder`` and ``until``), nothing changed."""

    refused: HoldingRefusal | None = None
    reason: str = ""
    holder: str | None = None
    until: float | None = None


async def hold_card(
    holding: CardHolding,
    *,
    open_conversation: Callable[[str], Awaitable[Conversation]],
    by: str,
    roles: Collection[str] = (),
    person_roles: Collection[str] = (),
    may_decide: Callable[[str, Suggestion], bool] | None = None,
) -> HoldingOutcome:
    """Make ``holding`` by ``by`` (holding ``roles``; an assignment's ``person`` holds ``person_roles``), as
    ``Conversation.claim``, ``release`` or ``assign`` would, the conversation opened by ``open_conversation``
    and held (tried again for up to :data:`BUSY_WAIT` seconds while another call holds it). ``may_decide(who,
    suggestion)``, the application's word on who may decide the card, is asked of ``by`` for a claim or an
    assignment and of the person assigned. Every refusal is an outcome, never an exception: a program shows it
    and carries on."""

    async def hold(conversation: Conversation) -> HoldingOutcome:
        subject = next((each for each in conversation.pending if each.id == holding.id), None)
        if isinstance(subject, Suggestion) and may_decide is not None:
            if holding.kind != "release" and not may_decide(by, subject):
                return HoldingOutcome(refused="forbidden", reason=f"{by} may not decide it")
            if holding.person is not None and not may_decide(holding.person, subject):
                return HoldingOutcome(refused="forbidden", reason=f"{holding.person} may not decide it")
        try:
            if holding.kind == "claim":
                until = await conversation.claim(holding.id, by=by, roles=roles, seconds=holding.seconds)
                return HoldingOutcome(until=until)
            if holding.kind == "release":
                await conversation.release(holding.id, by=by)
            else:
                await conversation.assign(
                    holding.id,
                    by=by,
                    roles=roles,
                    person=holding.person,
                    person_roles=person_roles,
                    role=holding.role,
                )
        except ClaimRefused as refused:
            return HoldingOutcome(
                refused=cast(HoldingRefusal, refused.code),
                reason=refused.hint,
                holder=refused.holder,
                until=refused.until,
            )
        except AlreadyDecided as ended:
            how = _ENDED.get(ended.how, ended.how)
            return HoldingOutcome(
                refused="already-decided", reason=f"{how} already{f' by {ended.by}' if ended.by else ''}"
            )
        except NotWaiting:
            return HoldingOutcome(
                refused="not-waiting", reason="it does not wait for a decision in this conversation"
            )
        return HoldingOutcome()

    held = await _when_held(holding.conversation, open_conversation, hold)
    return HoldingOutcome(refused="busy", reason=_busy_words(holding.conversation)) if held is None else held


#: How a card ended, by the decision (or the outcome) :class:`~dial_runtime.AlreadyDecided` names.
_ENDED = {
    "accept": "accepted",
    "dismiss": "dismissed",
    "edit": "run edited",
    "say": "set aside by new words",
    "expire": "expired",
}


def _refused(choice: BulkChoice, code: BulkRefusal, reason: str) -> BulkOutcome:
    return BulkOutcome(
        conversation=choice.conversation, id=choice.id, decision=choice.decision, refused=code, reason=reason
    )
