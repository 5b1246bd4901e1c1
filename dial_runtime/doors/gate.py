"""The one approval step of every door: a call from an agent the runtime does not drive, made a proposal that a
person decides on any surface, and the outcome handed back.

A door (the MCP server, a framework's bridge) gives the :class:`Gate` each call as an action and a payload:

- an action the domain does not have, or a payload it refuses, is :class:`Refused` at once with the issue's
  ``code``, ``field`` and ``hint`` (the agent corrects itself; nobody is asked, nothing is recorded);
- otherwise the call is the reply of an :class:`~dial_runtime.agents.outside.OutsideAgent` in a stored
  conversation, and everything the runtime does with a proposal follows: an action that changes nothing runs at
  once, one that does waits for a person (the person the gate is given decides in the call; by default nobody
  does, and the card waits for the panel, a link, ``dial-runtime decide``, the terminal), under the action's
  approval policy and deadline. The call is :class:`Ended` (the card, with the outcome reported) or
  :class:`Waits` (the card waiting), and :meth:`Gate.settle` waits for it to end, watching the store, so the
  decision may come from any process.

Each call has a conversation of its own, named by the action and the payload (:meth:`Gate.conversation_id`),
or by the key the caller gives it (a framework's tool call id, a client's idempotency key), not one
conversation per client: the turn loop lets a proposal wait for a person only while the agent says
nothing more (new words supersede what waits), whereas the calls of an agent outside are independent and may
be in flight together. The name makes a call found again after anything that cut it short:

- a call made again while its card waits is the same proposal (no second card), whoever makes it;
- a call made again after its card ended in a later call (a decision, an expiry) that no call has handed back yet
  is answered with that outcome: a client that lost the answer to a process dying, a connection dropping or a
  wait running out finds it, and the action never runs twice. Handing an outcome back leaves a receipt on the log
  (an empty ``said`` by the caller), so the next identical call is a new proposal, on whose card the person sees
  that the same was done before.

A keyed call needs none of this: its key names it for good, so the same key always finds its card, and the
outcome of an ended one is the answer however often it is asked.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import attrs
import stamina

from ..agents.outside import OutsideAgent
from ..driver import Conversation
from ..driver.built import DeferringHuman
from ..errors import ConversationBusy, StillWaiting
from ..language.outcomes import escape_attribute, escape_text
from ..ports import HumanPort, StorePort
from ..runtime.events import LogEntry
from ..runtime.records import as_issue
from ..views.calls import handed_back
from ..views.person import Card, project

if TYPE_CHECKING:  # the links extra's: a gate without an announcer needs none of it
    from ..decisions.announce import Announcer

__all__ = ["Ended", "Gate", "Refused", "StillWaiting", "Waits", "not_run"]

#: The characters of a conversation id every surface serves (the web surface's rule), and its longest length.
_ID_CHARACTERS = re.compile(r"[A-Za-z0-9._:@-]+")
_ID_LENGTH = 128
#: An action's name as it may stand in a conversation id (MCP's tool names are of these characters).
_ACTION_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")
K = TypeVar("K")

#: Seconds a call waits for a conversation another process holds (a decision running its action) before giving up.
BUSY_WAIT = 30.0


@attrs.frozen
class Refused:
    """A call refused before anything was recorded: ``code``, ``field`` (the payload's path at fault, when one
    is) and ``hint`` say what to change."""

    code: str
    hint: str
    field: str | None = None


@attrs.frozen
class Waits:
    """A call whose card waits for a person, in conversation ``conversation_id``."""

    conversation_id: str
    card: Card


@attrs.frozen
class Ended:
    """A call whose card ended: ``card.reported`` is the outcome the agent is owed."""

    conversation_id: str
    card: Card


class Gate:
    """Calls from agents outside the runtime as proposals of ``domain``, logged in ``store`` (see the module).

    ``human`` decides in the call (a policy, a test's person; default: nobody, every card waits for a later
    decision); ``prefix`` begins every conversation id (letters, digits and ``._:@-``: a door's name, or its
    tenant's); ``decide_timeout`` bounds every decision of an action that sets no deadline of its own (seconds,
    ``None``: no bound); ``announcer`` tells people of each card that starts waiting (emails, webhooks, with
    decision links: see :class:`~dial_runtime.decisions.announce.Announcer`); ``concurrency`` bounds the
    conversations the gate holds at once (each holds a store lock; calls beyond it queue); ``clock`` gives the
    log's times.
    """

    def __init__(
        self,
        domain: Any,
        store: StorePort,
        *,
        human: HumanPort | None = None,
        prefix: str = "door",
        decide_timeout: float | None = None,
        announcer: Announcer | None = None,
        concurrency: int = 32,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _ID_CHARACTERS.fullmatch(prefix) or len(prefix) > 64:
            raise ValueError(f"a door's prefix is 1 to 64 letters, digits or ._:@-, not {prefix!r}")
        self.domain = domain
        self.store = store
        self.human: HumanPort = human if human is not None else DeferringHuman()
        self.prefix = prefix
        self.decide_timeout = decide_timeout
        self.announcer = announcer
        self.clock = clock
        # Each conversation held takes a store lock (on PostgreSQL, a connection of its own): a thousand calls at
        # once must not take a thousand connections. Waiting calls hold none (the store's watch serves them all).
        self._room = anyio.Semaphore(concurrency)

    def conversation_id(self, action: str, payload: Any, key: str | None = None) -> str:
        """The conversation of every call of ``action`` with ``payload``: the prefix, the action and a digest of
        both (the digest alone when the action's name would not fit a conversation id); of a keyed call,
        ``PREFIX:@key:KEY`` (a digest of the key when the key would not fit)."""
        if key is not None:  # "@key" is no action's name: a keyed call's id is never another call's
            named = f"{self.prefix}:@key:{key}"
            if _ID_CHARACTERS.fullmatch(named) and len(named) <= _ID_LENGTH:
                return named
            return f"{self.prefix}:@key:{hashlib.sha256(key.encode()).hexdigest()[:40]}"
        digest = hashlib.sha256(_canonical(action, payload).encode()).hexdigest()
        named = f"{self.prefix}:{action}:{digest[:24]}"
        if _ACTION_CHARACTERS.fullmatch(action) and len(named) <= _ID_LENGTH:
            return named
        return f"{self.prefix}:{digest[:40]}"

    def refusal(self, action: str, payload: Any) -> Refused | None:
        """Why the domain refuses ``action`` with ``payload`` (an unknown action, a payload its schema or its
        checks refuse), else ``None``."""
        if action not in _actions(self.domain):
            known = ", ".join(sorted(_actions(self.domain)))
            return Refused(code="unknown-action", hint=f"There is no tool {action!r}; the tools are: {known}.")
        validate = getattr(self.domain, "validate", None)
        issue = as_issue(validate(action, payload)) if callable(validate) else None
        if issue is None:
            return None
        hint = issue.hint or "Change the arguments."
        return Refused(code=issue.code or "invalid-payload", field=issue.field, hint=hint)

    def _conversation(self, conversation_id: str, agent: OutsideAgent) -> Conversation:
        return Conversation(
            agent=agent,
            domain=self.domain,
            human=self.human,
            store=self.store,
            conversation_id=conversation_id,
            decide_timeout=self.decide_timeout,
            clock=self.clock,
        )

    async def propose(
        self, action: str, payload: Any, *, by: str, key: str | None = None
    ) -> Refused | Waits | Ended:
        """Make the call of ``action`` with ``payload`` by the agent outside named ``by`` a proposal, or find the
        proposal it repeats (see the module). A ``key`` (the caller's id of the call: a framework's tool call id,
        a client's idempotency key) names one call for good: made again, it finds that call's card, waiting or
        ended, and a key used for another action or payload is refused (``key-reused``).
        :class:`~dial_runtime.ConversationBusy` when another process holds the conversation past
        :data:`BUSY_WAIT` seconds, :class:`~dial_runtime.LogError` when its stored log cannot be folded."""
        refused = self.refusal(action, payload)
        if refused is not None:
            return refused
        conversation_id = self.conversation_id(action, payload, key)
        async with self._room:
            async for attempt in _while_busy():
                with attempt:
                    return await self._propose(conversation_id, action, payload, by, keyed=key is not None)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    async def _propose(
        self, conversation_id: str, action: str, payload: Any, by: str, *, keyed: bool
    ) -> Refused | Waits | Ended:
        agent = OutsideAgent()
        conversation = self._conversation(conversation_id, agent)
        async with conversation.holding():
            last = _last_card(conversation.log)
            if keyed and last is not None:
                if _canonical(last.action, last.proposed) != _canonical(action, payload):
                    return Refused(
                        code="key-reused",
                        field="key",
                        hint=f"The key names another call ({last.action}); give each call a key of its own.",
                    )
                return Waits(conversation_id, last) if last.waiting else Ended(conversation_id, last)
            if last is not None and last.waiting:
                return Waits(conversation_id, last)
            if last is not None and not _handed_back(conversation.log, last):
                await conversation.say("", by=by)  # the receipt: the outcome is handed back now
                return Ended(conversation_id, last)
            agent.hand_in(_suggestion(action, payload))
            await conversation.say(f"calls {action}", by=by)
            card = _last_card(conversation.log)
        if card is None or (last is not None and card.id == last.id):
            return Refused(
                code="conversation-ended",
                hint=f"The conversation {conversation_id} has ended: nothing more is proposed in it.",
            )
        if not card.waiting:
            return Ended(conversation_id, card)
        if self.announcer is not None:  # a new card waits: tell whom the announcer names (it never raises)
            await self.announcer.deliver(await self.announcer.announcements(conversation_id, {}, [card]))
        return Waits(conversation_id, card)

    async def settle(self, waits: Waits, *, by: str, within: float) -> Waits | Ended:
        """Wait at most ``within`` seconds for the card of ``waits`` to end, decided in any process (the store is
        watched), expiring it when its deadline passes meanwhile; an outcome that ends it is handed back to
        ``by`` (the receipt goes on the log). The card as it stands when the time is up."""
        return await self.settle_card(waits.conversation_id, waits.card.id, by=by, within=within)

    async def settle_card(
        self, conversation_id: str, suggestion_id: str, *, by: str, within: float
    ) -> Waits | Ended:
        """:meth:`settle` for the card a caller named (a 2026-07-28 MCP call's ``requestState``);
        :class:`LookupError` when the conversation has no such card."""
        card: Card | None = None
        with anyio.move_on_after(within if math.isfinite(within) else math.inf):
            async with self.store.watch(conversation_id) as changes:  # watching first: no decision slips past
                while True:
                    entries, card = await self._card(conversation_id, suggestion_id)
                    if not card.waiting:
                        return await self._hand_back(conversation_id, card, by)
                    due = self._deadline(entries, suggestion_id)
                    with anyio.move_on_after(max(0.0, due - self.clock())) as timer:
                        await anext(changes)
                    if timer.cancelled_caught:  # its deadline passed with nobody deciding: it expires now
                        await self._expire(conversation_id)
        if card is None:  # the time was up before the store was read: how the card stands now
            _, card = await self._card(conversation_id, suggestion_id)
            if not card.waiting:
                return await self._hand_back(conversation_id, card, by)
        return Waits(conversation_id, card)

    async def withdraw(self, waits: Waits, *, by: str) -> None:
        """Take the call of ``waits`` back while its card waits (the caller stopped waiting for good): the card
        ends superseded, as when an agent says something new, and a decision arriving later finds it ended."""
        async with self._room:
            async for attempt in _while_busy():
                with attempt:
                    conversation = self._conversation(waits.conversation_id, OutsideAgent())
                    async with conversation.holding():
                        current = project(conversation.log).card(waits.card.id)
                        if current is not None and current.waiting:
                            await conversation.say("(withdrawn)", by=by)
                    return

    async def _card(self, conversation_id: str, suggestion_id: str) -> tuple[list[LogEntry], Card]:
        """The conversation's log and the card as they stand; :class:`LookupError` when there is no such card."""
        entries = await self.store.read(conversation_id)
        card = project(entries).card(suggestion_id)
        if card is None:
            raise LookupError(f"no suggestion {suggestion_id} in conversation {conversation_id}")
        return entries, card

    async def settle_all(
        self, proposed: Mapping[K, Refused | Waits | Ended], *, by: str, within: float
    ) -> dict[K, Refused | Ended]:
        """Each of ``proposed`` once it ended (a refusal as it is), waiting at most ``within`` seconds for them
        all together: how a bridge hands a framework every decision of a paused run at once.
        :class:`~dial_runtime.StillWaiting` naming the cards still waiting when the time is up."""
        settled: dict[K, Refused | Ended] = {}
        with anyio.move_on_after(within):
            for name, answer in proposed.items():
                if isinstance(answer, Waits):
                    answer = await self.settle(answer, by=by, within=within)
                if not isinstance(answer, Waits):
                    settled[name] = answer
        still = [answer for name, answer in proposed.items() if name not in settled and isinstance(answer, Waits)]
        if still:
            raise StillWaiting(still)
        return settled

    async def _hand_back(self, conversation_id: str, card: Card, by: str) -> Ended:
        """The ended card, its receipt logged unless a call handed it back already."""
        async with self._room:
            async for attempt in _while_busy():
                with attempt:
                    conversation = self._conversation(conversation_id, OutsideAgent())
                    async with conversation.holding():
                        current = project(conversation.log).card(card.id) or card
                        if not _handed_back(conversation.log, current):
                            await conversation.say("", by=by)
                    return Ended(conversation_id, current)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    async def _expire(self, conversation_id: str) -> None:
        """Expire what is due in the conversation (its deadline passed while a call waited on it)."""
        async with self._room:
            async for attempt in _while_busy():
                with attempt:
                    await self._conversation(conversation_id, OutsideAgent()).expire_due()

    def _deadline(self, entries: Sequence[LogEntry], suggestion_id: str) -> float:
        """When the suggestion's deadline passes (``inf``: it has none), as the log's fold says."""
        folded = Conversation(agent=OutsideAgent(), domain=self.domain, human=self.human, log=entries)
        return next((when for ident, when in folded.deadlines if ident == suggestion_id), math.inf)


def _canonical(action: str, payload: Any) -> str:
    """The call as canonical JSON: what names it, and what a key's call is compared by."""
    return json.dumps([action, payload], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _while_busy() -> Any:
    """Attempts at holding a conversation, again while another process holds it, for :data:`BUSY_WAIT` seconds."""
    return stamina.retry_context(
        on=ConversationBusy, attempts=None, timeout=BUSY_WAIT, wait_initial=0.005, wait_max=0.25, wait_jitter=0.01
    )


def not_run(card: Card) -> tuple[str, str | None]:
    """Why an ended card's action did not run (or failed when it did), in words for the agent outside, and what
    the person said with the decision, if anything."""
    outcome = card.reported
    assert outcome is not None, "an ended card has its outcome"
    said = next((decision.text for decision in reversed(card.decisions) if decision.text), None)
    by = f" ({card.decided_by})" if card.decided_by else ""
    if outcome.expired:
        text = "Nobody decided on the call before its deadline: it was not run."
    elif outcome.status == "dismissed":
        text = f"The person{by} dismissed the call: it was not run."
    elif outcome.status == "superseded":
        text = f"The person{by} moved on without deciding: the call was not run."
    elif outcome.status == "failed":
        text = f"The person approved the call, and it failed: {outcome.error or 'no reason given'}."
        text += f" {outcome.hint}" if outcome.hint else ""
    else:
        text = f"The call was refused: {outcome.hint or outcome.error or outcome.code}."
    return (f"{text} They said: {said}" if said else text), said


def _actions(domain: Any) -> Mapping[str, Any]:
    actions = getattr(domain, "actions", None)
    return actions if isinstance(actions, Mapping) else {}


def _last_card(entries: Sequence[LogEntry]) -> Card | None:
    """The conversation's newest card (the last call's)."""
    cards = [item for item in project(entries).items if isinstance(item, Card)]
    return cards[-1] if cards else None


def _handed_back(entries: Sequence[LogEntry], card: Card) -> bool:
    """Whether the ended ``card``'s outcome went back to the agent outside (or needs not: an action that
    changes nothing is run again rather than answered from the log)."""
    if not card.mutates or card.seq is None or card.ended_seq is None:
        return True
    return handed_back(entries, card.seq, card.ended_seq)


def _suggestion(action: str, payload: Any) -> str:
    """The call as the agent's reply: one ``dial-suggest`` of ``action`` with ``payload`` (JSON)."""
    body = escape_text(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
    return (
        f'<dial><dial-suggest action="{escape_attribute(action)}">'
        f'<dial-payload type="application/json">{body}</dial-payload></dial-suggest></dial>'
    )
