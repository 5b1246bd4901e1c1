"""The driver: performs what the conversation core asks for, under anyio, and holds no lifecycle rule.

:class:`Conversation` is the public face of one conversation. Each call (``say``, ``decide``, ``answer``,
``resume``) runs a generator of :class:`~dial_runtime.runtime.core.ConversationCore` and performs the effects it
yields: it calls the agent, the person and the domain (plain or coroutine functions), bounds waits with cancel
scopes (so it runs on trio and asyncio alike), reads a streamed reply in a task of its own, shows rendered events
to ``on_event``, and with a store writes the log through before every effect the core marks durable (a message
sent, a wait for the person, an action run) and when a call ends. A crash then loses at most the processing since
the last write, never the record of an effect.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping
from types import GeneratorType
from typing import TYPE_CHECKING, Any, TypeGuard, cast

import anyio
import anyio.lowlevel

from ..errors import ConversationBusy, DialError, IllegalTransition, Interruption, LogError, NotWaiting
from ..language.outcomes import Outcome
from ..runtime.asking import DecisionPoint, first_verdict
from ..runtime.core import Call, ConversationCore, deliberate
from ..runtime.effects import (
    Answer,
    AwaitPerson,
    AwaitStream,
    CheckPrecondition,
    Consult,
    ConsultRules,
    DeadlinePassed,
    Effect,
    EndStream,
    Expired,
    GetContext,
    LookUp,
    NoReply,
    Ran,
    Reconcile,
    Replied,
    Review,
    Reviewed,
    RunAction,
    RunFailed,
    Send,
    Show,
    Streamed,
    Thinking,
    Unreconciled,
)
from ..runtime.events import Event, InformDeltaEvent, LogEntry
from ..runtime.flow import FlowRules
from ..runtime.records import (
    ActionSpec,
    AgentReply,
    Ask,
    Issue,
    ProviderMessage,
    RuleVerdict,
    Suggestion,
    TurnResult,
    as_action_spec,
    as_decision,
    as_issue,
)
from ..statemachines import CALL
from ..views.inbox import InboxStorePort, WaitingCard, stored_rows, waiting_cards
from ..views.person import not_waiting, shown_live

if TYPE_CHECKING:
    from ..ports import AgentPort, DecisionLike, DomainPort, HumanPort, StorePort, StreamingAgentPort

__all__ = ["CLAIM_SECONDS", "Conversation", "accepts_keyword", "accepts_message_id"]

logger = logging.getLogger("dial_runtime")

#: Seconds a stream left early gets to close.
CLOSE_TIMEOUT = 5.0

#: Seconds a claim on a waiting card lasts unless told (:meth:`Conversation.claim`).
CLAIM_SECONDS = 1800.0

#: Characters of a streamed reply read ahead of what the call has taken (while it waits for the person, say):
#: the reader waits past it, so a reply the core stops reading at a size limit is read at most one chunk
#: further, and a busy call holds a bounded buffer.
READ_AHEAD = 64 * 1024


def _awaitable(value: object) -> TypeGuard[Awaitable[Any]]:
    """Whether a collaborator's answer must be awaited (``inspect.isawaitable`` without its slow ABC check for
    the plain values most answers are)."""
    return hasattr(value, "__await__") or (type(value) is GeneratorType and inspect.isawaitable(value))


def _replied(reply: object) -> Replied:
    """An agent's whole reply: its text (``None`` is an empty reply, anything else is read with ``str``), or an
    :class:`AgentReply` with the model's message it came from."""
    if type(reply) is AgentReply:
        return Replied(reply.text, reply.provider)
    return Replied("" if reply is None else str(reply))


def _provider(item: object) -> ProviderMessage:
    """The model's message a streamed reply ended with; what else a stream yields but text is refused."""
    if not isinstance(item, ProviderMessage):
        raise TypeError(
            f"an agent's stream yields text, then at most one ProviderMessage; got {type(item).__name__}"
        )
    return item


def accepts_message_id(method: Any) -> bool:
    """Whether an agent's ``send`` or ``stream`` takes a ``message_id`` keyword (the message's id, to deduplicate
    a message sent again after a crash); a signature that cannot be read takes none."""
    return accepts_keyword(method, "message_id")


def accepts_keyword(method: Any, keyword: str) -> bool:
    """Whether ``method`` takes the keyword ``keyword``; a signature that cannot be read takes none. A bound
    method is read through its function, once per function: reading a signature costs more than a whole turn,
    and a class's method is the same for every conversation built with an instance of it."""
    function = getattr(method, "__func__", method)
    try:
        return _function_accepts(function, keyword)
    except TypeError:  # an unhashable callable: read it each time
        return _reads_keyword(function, keyword)


@functools.lru_cache(maxsize=1024)
def _function_accepts(function: Any, keyword: str) -> bool:
    return _reads_keyword(function, keyword)


def _reads_keyword(function: Any, keyword: str) -> bool:
    try:
        parameter = inspect.signature(function).parameters.get(keyword)
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)


#: Taking and giving back the conversation for a call (lookups: see ``Guard``).
_ACQUIRE = CALL.guard("acquire")
_RELEASE = CALL.guard("release")

IDLE = TurnResult(status="idle", turns=0)
"""The result of a call with nothing to do."""


def _missing(role: str, method: str) -> TypeError:
    return TypeError(f"Conversation: {role} needs a {method}() method")


class Conversation:
    """One conversation between a person and an agent that speaks DIAL.

    ``agent.send(message)``, ``human.decide(suggestion)``, ``human.answer(ask)`` and ``domain.run(action,
    payload)`` may be plain or coroutine functions; ``domain.validate``, ``domain.preview`` and
    ``domain.context`` are plain. ``timeout`` bounds each wait for the agent (a whole reply, or a streamed
    reply's first chunk), in seconds (``None``: no bound), and ``decide_timeout`` the person's time to decide on
    a suggestion from when it is shown (an action's ``ActionSpec.deadline`` first): the deadline goes on the log,
    and once it has passed the suggestion ends ``dismissed``, ``expired``, whether the person was asked in the call
    or decides later, and whichever comes first (a deferred one expires at the next call, or by
    :meth:`expire_due`; a decision after it is not taken). A streamed reply
    is also cut when ``reply_timeout`` has passed since its message was sent (300 s: a long answer from a slow
    local model fits, a model that writes on without end does not) or ``idle_timeout`` since its last chunk (30
    s: servers send tokens many times a second, so a silence that long is a stalled server or connection); a cut
    reply is handled as far as it got and the agent is told. ``call_timeout`` is each call's budget of time
    waiting for the agent, over all its turns (300 s, as long as one reply may take, so a slow model's long answer
    fits once and a loop of replies cut by their deadline stops after the first; ``None``: none): when it passes,
    the call stops as a deadline stops a reply, and the agent is told with the next call's message. ``log``
    rebuilds a conversation from its entries (a log no run of the runtime could have written raises
    :class:`~dial_runtime.LogError`);
    ``store`` and ``conversation_id`` make it durable (see :meth:`open`). ``clock`` gives each logged event's
    time (seconds since the epoch; the core reads no clock of its own). Constructing one has no side effects: a
    call a dead process left open is closed by the next call.
    """

    __slots__ = (
        "_budget",
        "_core",
        "_gate",
        "_holder",
        "_identified",
        "_inbox",
        "_interrupting",
        "_keyed",
        "_more_streamed",
        "_on_event",
        "_shown",
        "_stale",
        "_store",
        "_stored",
        "_text",
        "_thinking",
        "_waiting",
        "_writing",
        "agent",
        "call_timeout",
        "domain",
        "human",
        "id",
        "idle_timeout",
        "reply_timeout",
        "timeout",
    )

    def __init__(
        self,
        *,
        agent: AgentPort,
        domain: DomainPort,
        human: HumanPort,
        on_event: Callable[[Event | InformDeltaEvent], object] | None = None,
        timeout: float | None = 90.0,
        reply_timeout: float | None = 300.0,
        idle_timeout: float | None = 30.0,
        call_timeout: float | None = 300.0,
        max_turns: int = 8,
        decide_timeout: float | None = None,
        log: Iterable[LogEntry] = (),
        store: StorePort | None = None,
        conversation_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Checked here, not in a helper per port: a conversation is often built for one call.
        if not callable(getattr(agent, "send", None)):
            raise _missing("agent", "send")
        if not callable(getattr(human, "decide", None)):
            raise _missing("human", "decide")
        if not callable(getattr(domain, "run", None)):
            raise _missing("domain", "run")
        if (store is None) != (conversation_id is None):
            raise TypeError("Conversation: a store needs a conversation_id, and a conversation_id a store")
        if store is not None and log:
            raise TypeError("Conversation: a stored conversation's log comes from its store; pass no log")
        self.agent = agent
        self.domain = domain
        self.human = human
        self._on_event = on_event
        self.timeout = timeout
        self.reply_timeout = reply_timeout
        self.idle_timeout = idle_timeout
        self.call_timeout = call_timeout
        self._budget: float | None = None  # what is left of the call's time for the agent (None: no bound)
        self.id = conversation_id
        # The domain's flow: its flow_rules when it offers FlowRules (a Domain with a flow does).
        flow = rules if isinstance(rules := getattr(domain, "flow_rules", None), FlowRules) else None
        # By position: keywords would build a dict for every conversation built.
        self._core = ConversationCore(
            log if store is None else (),
            max_turns,
            decide_timeout,
            callable(getattr(human, "answer", None)),  # whether the person can answer asks
            flow,
            conversation_id,
            clock,
        )
        folded = len(self._core.log.events)
        self._store = store
        self._stored = folded if store is None else 0
        self._stale = store is not None  # a stored conversation reads its log on its first call
        # A store that keeps the inbox's read model, and the waiting cards its rows hold (None: unknown). A store
        # wrapped by an application's own class keeps it only if the wrapper's append takes the rows too.
        keeps = callable(getattr(store, "keep_waiting", None)) and accepts_keyword(
            getattr(store, "append", None), "waiting"
        )
        self._inbox = cast("InboxStorePort", store) if keeps else None
        self._waiting: tuple[WaitingCard, ...] | None = None
        self._gate = CALL.initial
        self._holder: object = None  # the task holding the conversation across its calls (see holding)
        self._shown = folded  # the events before this are not shown to on_event
        self._writing: tuple[object, anyio.Lock] | None = None
        self._thinking: Awaitable[Any] | None = None
        self._more_streamed: Callable[[], Awaitable[Streamed]] | None = None
        self._text: tuple[InformDeltaEvent, ...] = ()  # text of a streamed reply not shown yet (see _show)
        self._interrupting: str | None = None  # why the call in progress is being cancelled, when someone says
        self._identified: tuple[object, bool, bool] | None = None  # the agent, and whether send, stream take ids
        self._keyed: tuple[object, bool] | None = None  # the domain, and whether its run takes a key

    @classmethod
    async def open(cls, store: StorePort, conversation_id: str, **options: Any) -> Conversation:
        """Open a durable conversation: rebuild its state by folding its stored log (a new id starts a new one).

        A call the previous process did not finish is closed the way a crash leaves it: an action that had
        started and has no result ends ``failed`` with code ``interrupted`` (it is never run again); suggestions
        and asks that were waiting for the person wait on, as if deferred (see :meth:`decide`); everything owed
        to the agent stays owed. ``options`` are the constructor's (``log`` is refused: the store holds it).
        """
        conversation = cls(store=store, conversation_id=conversation_id, **options)
        await conversation._hold(lambda: None)
        return conversation

    @property
    def on_event(self) -> Callable[[Event | InformDeltaEvent], object] | None:
        """Called with each event a surface renders (``RENDERED``) as it happens, and with the text of a streamed
        reply as it arrives (``inform-delta``, not on the log); its exceptions are logged."""
        return self._on_event

    @on_event.setter
    def on_event(self, value: Callable[[Event | InformDeltaEvent], object] | None) -> None:
        """Replace the callback: it is shown what is recorded from now on, not what came before."""
        self._on_event = value
        self._shown = len(self._core.log.events)
        self._text = ()

    @property
    def max_turns(self) -> int:
        """The most turns one call runs."""
        return self._core.max_turns

    @max_turns.setter
    def max_turns(self, value: int) -> None:
        self._core.max_turns = value

    @property
    def decide_timeout(self) -> float | None:
        """The longest wait for one decision, in seconds (``None``: no bound)."""
        return self._core.decide_timeout

    @decide_timeout.setter
    def decide_timeout(self, value: float | None) -> None:
        self._core.decide_timeout = value

    @property
    def log(self) -> tuple[LogEntry, ...]:
        """Every event so far, in order: the conversation's state is a fold over it."""
        return tuple(self._core.log.entries())

    @property
    def facts(self) -> dict[str, Any]:
        """Facts the agent declared (unpaired ``dial-declare``), by context key; a later declare overwrites."""
        return dict(self._core.state.facts)

    @property
    def stuck(self) -> LogError | None:
        """The error of the stored entry this conversation could not fold in (another writer stored a log no run
        could have written), or ``None``. While stuck, the conversation reads as it was before that entry's
        batch, and every call raises this error again (naming the entry) until the store's log is mended."""
        return self._core.stuck

    @property
    def ended(self) -> bool:
        """Whether the conversation has ended."""
        return self._core.state.ended

    @property
    def flow_state(self) -> str | None:
        """The state of the domain's flow (``None`` for a domain without one)."""
        return self._core.state.flow_state

    @property
    def result(self) -> str | None:
        """The final state of the domain's flow that ended the conversation, else ``None``."""
        return self._core.state.result

    @property
    def owed(self) -> tuple[Outcome, ...]:
        """Outcomes the agent has not been told yet; they go with the next message."""
        return tuple(self._core.state.owed_outcomes)

    @property
    def in_call(self) -> bool:
        """Whether the log ends inside a call: one being made now, or one a dead process left open (which the
        next call, or :meth:`recover`, closes)."""
        return self._core.state.in_call

    @property
    def pending(self) -> tuple[Suggestion | Ask, ...]:
        """The suggestions and asks waiting for a deferred decision or answer."""
        return self._core.state.pending()

    def cancelling(self, why: str) -> None:
        """Say why the call in progress is about to be cancelled (``"cancelled by the person"``): the log records
        the interruption in those words instead of a bare cancellation. For the call in progress only; a surface
        calls it just before it cancels the scope the call runs in."""
        self._interrupting = why

    async def recover(self) -> None:
        """Close now a call that a dead process left open in the log this conversation was built from (the next
        call does it otherwise), asking the domain's ``reconcile`` what became of an action it left running, and
        expire what waited past its deadline. A stored conversation does it under the store's lock, with what
        others stored meanwhile (:class:`ConversationBusy` while another call holds it)."""
        if self._store is not None:
            await self._hold(lambda: None)
            return
        await self._recover()

    def end(self) -> None:
        """End the conversation: the current reply (if any) is handled to its end, and no turn follows.

        With a store, the ending is written with the current call, or by :meth:`flush` between calls.
        """
        self._core.end("end() was called")

    async def flush(self) -> None:
        """Write what the log holds beyond the store's copy (a no-op without a store), then show ``on_event`` what
        was written; one write at a time.

        The write itself is shielded: no cancellation (a call cancelled, a client gone, a task group ending) cuts
        it short, so it lands whole or fails whole, and a cancellation waiting meanwhile takes effect after it. A
        write that fails leaves this object stale: it writes nothing more, its next call reads the conversation
        from the store again, and what was not written is dropped (the store's log is the truth).
        """
        if self._store is None or self._stale or self._stored >= len(self._core.log):
            return
        async with self._writing_lock():
            written = len(self._core.log)
            if self._stored < written and not self._stale:
                entries = self._core.log.entries(self._stored, written)
                cards = None if self._inbox is None else waiting_cards(self.id or "", self._core.state)
                with anyio.CancelScope(shield=True):
                    try:
                        if self._inbox is None or cards == self._waiting:
                            await self._store.append(self.id or "", entries, expected_seq=self._stored)
                        else:
                            assert cards is not None
                            await self._inbox.append(
                                self.id or "", entries, expected_seq=self._stored, waiting=stored_rows(cards)
                            )
                    except BaseException:
                        self._stale = True
                        self._waiting = None
                        raise
                self._stored = written
                self._waiting = cards
        if self._on_event is not None:
            self._show()

    def _writing_lock(self) -> anyio.Lock:
        """The lock that keeps writes in order, made for the event loop running now (a lock binds to its loop)."""
        token = anyio.lowlevel.current_token()
        if self._writing is None or self._writing[0] != token:
            self._writing = (token, anyio.Lock(fast_acquire=True))
        return self._writing[1]

    async def say(self, text: str | None = "", *, by: str | None = None, roles: Iterable[str] = ()) -> TurnResult:
        """Send the person's words (with whatever is owed) and run turns until the agent needs nothing back;
        ``by`` names who spoke, for the log (``said``) and what it shows, and ``roles`` are theirs.

        Returns at once with status ``"ended"`` after the conversation ended (the words are logged, nothing is
        sent), and with ``"idle"`` and no turn when there are no words and nothing is owed. Words said while
        suggestions await a deferred decision supersede them, since they end those suggestions: when the approval
        policy of one of them does not admit ``by`` with ``roles`` (see ``decide``), nothing is said, each such
        suggestion gets an ``approval-refused`` on the log, and the result is ``awaiting``. Raises
        :class:`ConversationBusy` while another call drives the conversation, and the original exception of a
        failed send.
        """
        words = text or ""
        return await self._hold(self._core.say, words, by, tuple(roles))

    async def decide(
        self,
        suggestion_id: str,
        decision: DecisionLike,
        *,
        by: str | None = None,
        shown: str | None = None,
        via: str | None = None,
        roles: Iterable[str] = (),
        link: str | None = None,
    ) -> TurnResult:
        """Take the person's deferred decision on a suggestion and carry on with the conversation.

        ``decision`` is ``Accept()``, ``Dismiss()``, ``Edit(payload)`` or ``Say(text)`` (or their dict forms).
        Once nothing is pending the turn loop continues, and the call returns its ``TurnResult``; a refused edit
        leaves the suggestion pending with its issue and a preview of the edited payload (status ``awaiting``).
        ``shown`` is the ``digest`` of the suggestion the person saw: checked under the conversation's lock, with
        the log as the store has it, so a decision on a payload that is no longer the one waiting cannot run.
        ``via`` names the surface it came through (``"web"``, ``"terminal"``, ``"cli"``), for the log's audit;
        ``roles`` are the decider's, which an action's approval policy may require (``ApprovalPolicy``). Under a
        policy only a named person holding one of its roles may end the suggestion, by any decision (or by new
        words, see ``say``); a refused decision is logged (``approval-refused``) and the suggestion waits on. An
        accept is one approval: the result is ``awaiting`` until the policy is met, and the action runs once,
        when it is. ``link`` is the id of the single-use decision link the decision comes through
        (``LinkClaims.token_id``): it is logged with the decision, checked under the lock, so one link decides
        a suggestion once however many people race to use it.

        Changes nothing and raises :class:`~dial_runtime.AlreadyDecided` (``by``, ``how``) when the suggestion has
        ended (another tab or worker decided it), :class:`~dial_runtime.PayloadChanged` when ``shown`` does not
        match, :class:`~dial_runtime.LinkRefused` (``replayed``) when ``link`` decided it already, ``DialError``
        when there is no such suggestion awaiting a decision.
        """
        chosen = as_decision(decision)
        held = tuple(roles)
        return await self._hold(lambda: self._core.decide(suggestion_id, chosen, by, shown, via, held, link))

    async def answer(self, ask_id: str, text: str | None, *, by: str | None = None) -> TurnResult:
        """Take the person's deferred answer to an ask and carry on (an empty answer: the question stands);
        :class:`~dial_runtime.AlreadyDecided` when it was answered already or ended, and nothing changes."""
        words = text or ""
        return await self._hold(lambda: self._core.answer(ask_id, words, by))

    async def claim(
        self, suggestion_id: str, *, by: str, roles: Iterable[str] = (), seconds: float = CLAIM_SECONDS
    ) -> float:
        """Claim a suggestion waiting for a deferred decision for ``by`` (holding ``roles``), for ``seconds``
        (half an hour unless told): everyone who sees the card sees who has it, until when, so that others leave
        it alone. A claim decides nothing and locks nobody out: anyone the card's policy admits may still decide
        it. Claiming a card one holds renews the claim. Returns when the claim ends (seconds since the epoch).

        Refused, changing nothing: :class:`~dial_runtime.errors.ClaimRefused` (``code``) when the card's rules
        refuse it (someone else's claim holds, the policy does not admit ``by``, ``by`` approved it already),
        :class:`~dial_runtime.AlreadyDecided` when it has ended, ``NotWaiting`` when it does not wait,
        ``ValueError`` for ``seconds`` that is not a positive number.
        """
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"a claim lasts a positive number of seconds, not {seconds!r}")
        held = tuple(roles)
        ends: list[float] = []

        def claiming() -> None:
            until = self._core.clock() + seconds
            self._core.claim(suggestion_id, by, held, until)
            ends.append(until)

        await self._hold(claiming)
        return ends[0]

    async def release(self, suggestion_id: str, *, by: str) -> None:
        """Give back ``by``'s claim on a waiting suggestion; refused as :meth:`claim` is (``not-claimed`` when
        ``by`` holds no claim on it that still holds)."""
        await self._hold(lambda: self._core.release(suggestion_id, by))

    async def assign(
        self,
        suggestion_id: str,
        *,
        by: str,
        roles: Iterable[str] = (),
        person: str | None = None,
        person_roles: Iterable[str] = (),
        role: str | None = None,
    ) -> None:
        """Route a waiting suggestion to ``person`` (who holds ``person_roles``) or to the holders of ``role``, or,
        with neither, to nobody; ``by`` (holding ``roles``) must be one its policy admits, and so must the person
        or role. An assignment to a person ends a claim someone else holds on it. Like a claim, it decides
        nothing. Refused as :meth:`claim` is (``assignee-not-a-decider``)."""
        held, theirs = tuple(roles), tuple(person_roles)
        await self._hold(
            lambda: self._core.assign(suggestion_id, by, held, person=person, person_roles=theirs, role=role)
        )

    async def resume(self) -> TurnResult:
        """Carry on with a reply whose handling a crash cut short, once nothing awaits the person."""
        return await self._hold(self._core.resume)

    async def expire_due(self) -> TurnResult:
        """Fire now what is due of the deferred suggestions' times, as every call (and :meth:`open`) does first:
        end those whose deadline has passed (``dismissed``, ``expired``) and those whose premise the domain no
        longer finds holding (``invalid``), remind, escalate; for a scheduler that fires deadlines with nobody
        watching. Returns that call's result (its outcomes the ended ones; ``awaiting`` while others still wait),
        or ``idle`` with no turn when nothing is due."""
        return await self._hold(lambda: None)

    @property
    def deadlines(self) -> list[tuple[str, float]]:
        """The suggestions waiting for a deferred decision that have a time coming (seconds since the epoch: a
        reminder, an escalation, a deadline, the next check of a premise), each with its soonest, soonest first:
        when a scheduler should call :meth:`expire_due`."""
        return self._core.deadlines()

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[None]:
        """Hold the conversation, in the store across processes, for every call this task makes within the block:
        no other worker's or task's call comes between them, so what the calls decide is decided together (the
        web surface takes a resume's decisions so). Entering reads what others stored meanwhile, so whatever is
        checked within the block holds until its end. Raises :class:`ConversationBusy` at once when someone else
        holds the conversation, and when this object is held already. Without a store it holds nothing: the calls
        of one object are made one at a time anyway.
        """
        if self._store is None:
            yield
            return
        if self._holder is not None:
            raise ConversationBusy("Conversation: this conversation is held already")
        async with self._store.lock(self.id or ""):
            self._holder = anyio.get_current_task().id
            try:
                await self._catch_up()
                yield
            finally:
                self._holder = None

    async def _hold(self, start: Callable[..., Call | None], *arguments: Any) -> TurnResult:
        """Hold the conversation for one call (in this process, and in the store across processes), close what a
        dead process left open, then start the call (``start(*arguments)``) and drive it (none: an idle result);
        with a store, the log is written when the call ends, however it ends."""
        try:
            self._gate = _ACQUIRE[self._gate]
        except IllegalTransition:
            raise ConversationBusy("Conversation: a call is already driving this conversation") from None
        self._budget = self.call_timeout
        try:
            if self._store is None:
                expired = await self._recover()
                call = self._started(start, arguments)
                return (expired or IDLE) if call is None else await self._perform(call)
            held = self._holder is not None and self._holder == anyio.get_current_task().id
            async with contextlib.nullcontext() if held else self._store.lock(self.id or ""):
                if not held or self._stale:  # holding() read the store, and nobody has written since
                    await self._catch_up()
                try:
                    expired = await self._recover()
                    call = self._started(start, arguments)
                    return (expired or IDLE) if call is None else await self._perform(call)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.flush()
        finally:
            self._interrupting = None
            self._gate = _RELEASE[self._gate]

    def _started(self, start: Callable[..., Call | None], arguments: tuple[Any, ...]) -> Call | None:
        """``start(*arguments)``; a decision or answer the core refuses because its subject is not waiting is
        :class:`AlreadyDecided` (by whom, how) when what the person sees of the log shows it ended."""
        try:
            return start(*arguments)
        except NotWaiting as refused:
            raise not_waiting(self._core.log.entries(), refused) from None

    async def _catch_up(self) -> None:
        """Fold in what other workers stored since this object last saw the store (all of it when stale)."""
        assert self._store is not None
        stored = 0 if self._stale else self._stored
        fresh = await self._store.read(self.id or "", after_seq=stored)
        if fresh or self._stale:
            self._core.take_stored(fresh, stored)
            self._stored = self._shown = stored + len(fresh)
            self._stale = False
            if self._inbox is not None:  # the store's rows are those of the log read: written with it
                self._waiting = waiting_cards(self.id or "", self._core.state)

    async def _recover(self) -> TurnResult | None:
        """Close what a dead process left open, then expire the deferred suggestions whose deadline passed (the
        result of that expiry, ``None`` when none was due)."""
        settling = self._core.settle()
        expired: TurnResult | None = None if settling is None else await self._perform(settling)
        self._show()
        return expired

    def _show(self) -> None:
        """Show ``on_event`` the events a surface renders (``RENDERED``) that the core recorded since the last time
        and, with a store, the store has acknowledged; then the text of a streamed reply that the person may read
        now, unless a rendered event before it still waits for its write (its exceptions are logged and go no
        further)."""
        if self._on_event is None:  # nothing to show it to: the setter starts from the log
            return
        core = self._core
        events = core.log.events
        start = self._shown
        limit = len(events) if self._store is None else max(self._stored, start)
        self._shown = limit
        waiting = limit < len(events) and any(shown_live(event) for event in events[limit:])
        notices: tuple[InformDeltaEvent, ...] = ()
        if self._text and not waiting:
            notices, self._text = self._text, ()
        if start == limit and not notices:
            return
        shown = [event for event in events[start:limit] if shown_live(event)]
        for event in [*shown, *notices] if notices else shown:
            try:
                self._on_event(event)
            except Exception:
                logger.exception("on_event raised for a %s event; the conversation goes on", event.type)

    async def _perform(
        self, call: Generator[Effect, Any, Any], *, first: object = None, until: type[Effect] | None = None
    ) -> Any:
        """Drive ``call``: send it ``first``, perform each effect it yields and send back what it came to, or
        throw in what it raised. Returns the call's result, or ``None`` at the first ``until`` effect."""
        value: Any = first
        error: BaseException | None = None
        while True:
            try:
                if error is None:
                    effect = call.send(value)
                else:
                    thrown, error = error, None
                    if isinstance(thrown, Exception) or self._interrupting is None:
                        effect = call.throw(thrown)
                    else:  # a cancellation someone put in words: the core logs those words
                        effect = call.throw(Interruption(self._interrupting, thrown))
            except StopIteration as stop:
                self._show()
                if until is not None:
                    raise RuntimeError(f"the call ended before {until.__name__}") from None
                return stop.value
            except Interruption as stopped:
                self._show()
                raise stopped.cause from None
            except BaseException:
                self._show()
                raise
            if self._on_event is not None:  # without one nothing is shown (its setter starts from the log)
                self._show()
            kind = type(effect)
            if until is not None and kind is until:
                return None
            try:
                # With a store, the log is written first before an effect that reaches outside the process, and,
                # for a watched conversation (shown only what is stored), before any wait or the person's turn.
                if self._store is not None and (
                    effect.durable
                    or (self._on_event is not None and (effect.faces_person or not effect.immediate))
                ):
                    await self.flush()
                # Dispatched on the effect's class: its ``immediate`` is a class attribute, which an instance
                # reads through the generic attribute lookup (a test holds _ANSWERS to the immediate effects).
                answer = _ANSWERS.get(kind)
                if answer is not None:
                    value = answer(self, effect)
                else:
                    value = await _PERFORMERS[kind](self, call, effect)
            except BaseException as raised:
                if isinstance(raised, Exception) and not isinstance(raised, DialError):
                    # The log keeps only its type (``reason``): its text and traceback are the operator's.
                    logger.error(
                        "%s raised while %s was performed", type(raised).__name__, kind.__name__, exc_info=raised
                    )
                value, error = None, raised

    def _context(self, effect: GetContext) -> object:
        context = getattr(self.domain, "context", None)
        return None if context is None else context()

    async def _send(self, call: Call, effect: Send) -> object:
        """The agent's reply (or that its stream began), or :class:`NoReply` when a deadline passed first: the
        reply's, or the call's (the time it waits for the agent is taken from the call's budget)."""
        if callable(getattr(self.agent, "stream", None)):
            started = anyio.current_time()
            try:
                return await self._stream(call, effect)
            finally:
                self._spend(started)
        return await self._send_whole(effect)

    def _spend(self, started: float) -> None:
        """Take the time waited for the agent since ``started`` (the event loop's clock) from the call's budget."""
        if self._budget is not None:
            self._budget = max(0.0, self._budget - (anyio.current_time() - started))

    def _no_reply(self, timeout: float | None) -> NoReply:
        """No reply before ``timeout`` (the reply's deadline) or the call's budget, whichever is shorter, with
        why the agent's tries failed meanwhile when it says (its ``last_failure``, as ``ChatAgent`` keeps it)."""
        cause = getattr(self.agent, "last_failure", None)
        cause = cause if isinstance(cause, str) and cause else None
        budget = self._budget
        if budget is not None and (timeout is None or budget < timeout):
            return NoReply(self.call_timeout or 0.0, call=True, cause=cause)
        return NoReply(timeout or 0.0, cause=cause)

    async def _send_whole(self, effect: Send) -> object:
        ids = None if effect.message_id is None else self._ids(effect, streamed=False)
        reply: object = self.agent.send(effect.message, **ids) if ids else self.agent.send(effect.message)
        if not _awaitable(reply):  # a plain send answered at once: it cannot be waited for, nor cut
            return _replied(reply)
        timeout, budget = self.timeout, self._budget
        bound = math.inf if timeout is None else timeout
        if budget is not None and budget < bound:
            bound = budget
        started = anyio.current_time()
        try:
            if bound == math.inf:
                reply = await reply
            else:
                with anyio.move_on_after(bound) as scope:
                    reply = await reply
                if scope.cancelled_caught:
                    return self._no_reply(timeout)
        finally:
            self._spend(started)
        return _replied(reply)

    def _ids(self, effect: Send, *, streamed: bool) -> dict[str, str]:
        """The message's id as a keyword, for an agent whose method takes one (looked up once per agent)."""
        if effect.message_id is None:
            return {}
        agent = self.agent
        if self._identified is None or self._identified[0] is not agent:
            stream = getattr(agent, "stream", None)
            self._identified = (agent, accepts_message_id(agent.send), accepts_message_id(stream))
        return {"message_id": effect.message_id} if self._identified[2 if streamed else 1] else {}

    async def _stream(self, call: Call, effect: Send) -> object:
        """Read the agent's streamed reply in a task of its own while the call handles what arrived so far.

        ``timeout`` (and ``reply_timeout``, when shorter) covers the stream until its first chunk: before that, a
        deadline that passes is no reply. After it, the reply's deadline (``reply_timeout`` from the send) and
        the idle deadline (``idle_timeout`` from the last chunk) bound the reading: when one passes, the agent's
        stream is closed and the core is told (:class:`DeadlinePassed`), as it is of a stream that broke off.
        What arrived goes to the call as :class:`Streamed` inputs: the first once a chunk is in, the next each time
        the call waits for more (:class:`AwaitStream`). Reading stops past the core's ``stream_limit`` and waits
        while :data:`READ_AHEAD` characters are not taken yet (the idle deadline counts from the wait's end); the
        call goes on in this task until the core is done with the stream (:class:`EndStream`).
        """
        arrived: list[str] = []
        over: list[Streamed] = []  # how the stream ended, once it has
        woken: list[anyio.Event] = [anyio.Event()]
        room: list[anyio.Event] = [anyio.Event()]  # set when the call took what arrived
        reply_timeout, idle_timeout, budget = self.reply_timeout, self.idle_timeout, self._budget
        now = anyio.current_time()
        reply_by = math.inf if reply_timeout is None else now + reply_timeout
        call_by = math.inf if budget is None else now + budget

        async def produce() -> None:
            failure: Exception | None = None
            passed: DeadlinePassed | None = None
            provider: ProviderMessage | None = None
            read = 0
            chunks = cast("StreamingAgentPort", self.agent).stream(
                effect.message, **self._ids(effect, streamed=True)
            )
            try:
                pieces = chunks.__aiter__()
                idle_by = math.inf
                reply_by_or_call = min(reply_by, call_by)
                # One scope for the whole reading, its deadline moved as chunks come: a scope per chunk costs
                # several times as much (a timer, the task looked up, entered and left), for every chunk.
                with anyio.CancelScope() as reading:  # the first chunk: the wait for it bounds it
                    while read <= effect.stream_limit:
                        try:
                            chunk = await pieces.__anext__()
                        except StopAsyncIteration:
                            break
                        if type(chunk) is not str:  # the model's own message, after the reply's text
                            provider = _provider(chunk)
                            continue
                        arrived.append(chunk)
                        read += len(chunk)
                        woken[0].set()
                        if sum(map(len, arrived)) >= READ_AHEAD:  # the call is busy: wait until it takes this
                            reading.deadline = math.inf
                            await room[0].wait()
                            room[0] = anyio.Event()
                        if idle_timeout is not None:
                            idle_by = anyio.current_time() + idle_timeout
                        until = min(reply_by_or_call, idle_by)
                        if until != reading.deadline:
                            reading.deadline = until
                if reading.cancelled_caught:
                    if call_by < reply_by and call_by <= idle_by:
                        passed = DeadlinePassed(deadline="call", seconds=self.call_timeout or 0.0)
                    elif reply_by <= idle_by:
                        passed = DeadlinePassed(deadline="reply", seconds=reply_timeout or 0.0)
                    else:
                        passed = DeadlinePassed(deadline="idle", seconds=idle_timeout or 0.0)
            except Exception as error:
                failure = error
            finally:
                close = getattr(chunks, "aclose", None)
                if close is not None:  # a stream left early is closed now, not by the garbage collector
                    with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                        try:
                            await close()
                        except Exception:
                            logger.exception("closing the agent's stream raised; the conversation goes on")
            over.append(Streamed(ended=True, failure=failure, passed=passed, provider=provider))
            woken[0].set()

        def taken() -> Streamed:
            chunks = tuple(arrived)
            arrived.clear()
            room[0].set()
            if not over:
                return Streamed(chunks=chunks)
            end = over[0]
            return Streamed(
                chunks=chunks, ended=True, failure=end.failure, passed=end.passed, provider=end.provider
            )

        async def more() -> Streamed:
            while not arrived and not over:
                await woken[0].wait()
                woken[0] = anyio.Event()
            return taken()

        first_chunk = min(math.inf if each is None else each for each in (self.timeout, reply_timeout))
        first = first_chunk if budget is None else min(first_chunk, budget)
        handling_error: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(produce)
            with anyio.move_on_after(first):
                await woken[0].wait()
            if not arrived and not over:
                group.cancel_scope.cancel()
                return self._no_reply(first_chunk)
            woken[0] = anyio.Event()
            self._more_streamed = more
            try:
                await self._perform(call, first=taken(), until=EndStream)
            except Exception as error:  # raised after the task group, not inside an exception group
                handling_error = error
            finally:
                self._more_streamed = None
                group.cancel_scope.cancel()
        if handling_error is not None:
            raise handling_error
        return None

    async def _await_stream(self, call: Call, effect: AwaitStream) -> Streamed:
        assert self._more_streamed is not None
        return await self._more_streamed()

    def _show_text(self, effect: Show) -> None:
        """Show the person the text of a reply as it arrives, once what is recorded before it is shown."""
        if self._on_event is not None:
            self._text = (*self._text, *effect.notices)
            self._show()

    def _look_up(self, effect: LookUp) -> ActionSpec | None:
        actions = getattr(self.domain, "actions", None)
        declared = actions.get(effect.action) if isinstance(actions, (dict, Mapping)) else None
        if declared is None or type(declared) is ActionSpec:  # the record itself: nothing to convert
            return declared
        return as_action_spec(declared)

    def _review(self, effect: Review) -> Reviewed:
        validate = getattr(self.domain, "validate", None)
        verdict = None if validate is None else validate(effect.action, effect.payload)
        issue = verdict if verdict is None or type(verdict) is Issue else as_issue(verdict)
        if not effect.preview or (issue is not None and not effect.refused_too):
            return Reviewed(issue)
        return Reviewed(issue, self._preview(effect.action, effect.payload))

    def _preview(self, action: str, payload: Any) -> str:
        """The domain's preview of a payload; the action's name when it has none or it raised."""
        preview = getattr(self.domain, "preview", None)
        if preview is None:
            return action
        try:
            text = preview(action, payload)
        except Exception:
            logger.exception("domain.preview raised for %r; showing the action name", action)
            return action
        return str(text) if text else action

    def _check_precondition(self, effect: CheckPrecondition) -> Issue | None:
        return premise_issue(self.domain, effect)

    def _consult_rules(self, effect: ConsultRules) -> RuleVerdict | None:
        return rule_on(self.domain, self.id, effect)

    def _consult(self, effect: Consult) -> object:
        """Put the question to the person: a plain function's answer is taken at once; an awaitable one is
        awaited by :meth:`_await_person` once the core has logged what it must."""
        question = effect.question
        reply: object = (
            self.human.decide(question) if isinstance(question, Suggestion) else self.human.answer(question)
        )
        if not _awaitable(reply):
            return self._answered(reply)
        self._thinking = reply
        return Thinking()

    def _answered(self, reply: object) -> Answer:
        """The human's reply, with who gave it, through which surface and holding which roles, when the human
        says (its ``by``, ``via`` and ``roles`` attributes, as the terminal's person has; read at each answer: a
        surface may set them per request)."""
        human = self.human
        by = getattr(human, "by", None)
        via = getattr(human, "via", None)
        roles = getattr(human, "roles", ())
        return Answer(
            reply,
            by=by if isinstance(by, str) else None,
            via=via if isinstance(via, str) else None,
            roles=(
                tuple(role for role in roles if isinstance(role, str))
                if isinstance(roles, (list, tuple, set, frozenset)) and roles
                else ()
            ),
        )

    async def _await_person(self, call: Call, effect: AwaitPerson) -> object:
        reply, self._thinking = self._thinking, None
        assert reply is not None
        if effect.deadline is None:
            return self._answered(await reply)
        with anyio.move_on_after(effect.deadline):
            return self._answered(await reply)
        return Expired()

    async def _run(self, call: Call, effect: RunAction) -> object:
        domain = self.domain
        if self._keyed is None or self._keyed[0] is not domain:
            self._keyed = (domain, accepts_keyword(domain.run, "key"))
        run: Callable[..., object] = domain.run
        try:
            result = (
                run(effect.action, effect.payload, key=effect.key)
                if self._keyed[1]
                else run(effect.action, effect.payload)
            )
            if _awaitable(result):
                result = await result
        except Exception as error:
            if not deliberate(error):  # the log keeps only its type: its text and traceback are the operator's
                logger.error("domain.run raised for %r", effect.action, exc_info=error)
            return RunFailed(error)
        return Ran(result)

    async def _reconcile(self, call: Call, effect: Reconcile) -> object:
        """What the domain's ``reconcile`` tells of a dead process's run: its result, its deliberate failure, or
        nothing (no ``reconcile``, ``LookupError``, or an exception it raised by accident: the effect stays
        unknown rather than reported failed)."""
        reconcile = getattr(self.domain, "reconcile", None)
        if not callable(reconcile):
            return Unreconciled("the domain has no reconcile")
        try:
            result: object = reconcile(effect.action, effect.payload, key=effect.key)
            if _awaitable(result):
                result = await result
        except LookupError as unknown:
            if type(unknown) is not LookupError:  # a KeyError or IndexError may be a bug in reconcile: say so
                logger.warning(
                    "domain.reconcile raised %s for %r: taken as cannot tell",
                    type(unknown).__name__,
                    effect.action,
                    exc_info=unknown,
                )
            return Unreconciled(str(unknown) or "the domain cannot tell")
        except Exception as error:
            if not deliberate(error):
                logger.error("domain.reconcile raised for %r", effect.action, exc_info=error)
                return Unreconciled(f"reconcile raised {type(error).__name__}")
            return RunFailed(error)
        return Ran(result)


def premise_issue(domain: object, asked: CheckPrecondition) -> Issue | None:
    """Why the premise of the suggestion ``asked`` about no longer holds, as ``domain``'s ``precondition`` says
    (``None``: it holds). A check that raises, or a domain with no ``precondition``, leaves it holding (the
    action's ``validate`` still runs before it runs); the failure is logged for the operator."""
    precondition = getattr(domain, "precondition", None)
    if not callable(precondition):
        return None
    try:
        return as_issue(precondition(asked.action, asked.payload))
    except Exception:
        logger.exception("domain.precondition raised for %r; taken as holding", asked.action)
        return None


def rule_on(domain: object, conversation_id: str | None, asked: ConsultRules) -> RuleVerdict | None:
    """What ``domain``'s ``approval_rules`` say of the suggestion a conversation's core ``asked`` about, about to
    wait for a person (:func:`~dial_runtime.runtime.asking.first_verdict`); ``None`` when it declares none, or no
    rule had an opinion: the person is asked, and nothing of the rules is logged. A rule that failed is logged
    for the operator too."""
    rules = getattr(domain, "approval_rules", None)
    if not rules:
        return None
    point = DecisionPoint(
        conversation=conversation_id or "",
        id=asked.suggestion_id,
        action=asked.action,
        payload=asked.payload,
        preview=asked.preview,
        principal=asked.principal,
        facts=dict(asked.facts),
        decided="waiting",
    )
    verdict = first_verdict(rules, point)
    if verdict.error is not None:
        logger.warning("rule %s failed on %r: %s; the person is asked", verdict.rule, asked.action, verdict.error)
    return None if verdict.rule is None else verdict


_ANSWERS: dict[type[Effect], Callable[[Conversation, Any], Any]] = {
    GetContext: Conversation._context,
    Show: Conversation._show_text,
    LookUp: Conversation._look_up,
    Review: Conversation._review,
    Consult: Conversation._consult,
    ConsultRules: Conversation._consult_rules,
    CheckPrecondition: Conversation._check_precondition,
}
"""How the driver answers each immediate effect."""

_PERFORMERS: dict[type[Effect], Callable[[Conversation, Call, Any], Awaitable[Any]]] = {
    Send: Conversation._send,
    AwaitStream: Conversation._await_stream,
    AwaitPerson: Conversation._await_person,
    RunAction: Conversation._run,
    Reconcile: Conversation._reconcile,
}
"""How the driver performs each effect that may wait."""
