"""The driver: runs one conversation's turns, doing the I/O the machines and the state call for.

Every status comes from a compiled machine table (:mod:`dial_runtime.statemachines`); every change of state is an
event appended to the log and folded into :class:`~dial_runtime.runtime.state.ConversationState`, which is where
the driver reads the turn loop's and each suggestion's state from. The driver awaits the agent, the person and the
domain under anyio cancel scopes, so it runs on trio and asyncio alike. With a store, the log is written through
before every step with an effect outside the process (a message sent, a question or a suggestion put to the
person, an action run) and when a call ends: a crash then loses at most the processing since the last write, never
the record of an effect (an action whose result was not written is reported as interrupted, never run again).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import CoroutineType, GeneratorType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream

from ..errors import ConversationBusy, DialError, DialSizeError
from ..language.outcomes import Outcome, outcome_reply, refusal_reply, to_json_ready
from ..language.parser import parse
from ..language.records import AskElement, Declare, Delegate, Element, Execute, Phatic, Suggest, is_json_type
from ..language.stream import StreamParser
from ..statemachines import OUTCOME_STATUS, SUGGESTION, TURN_LOOP
from .events import (
    ActionStartedEvent,
    AnsweredEvent,
    AskEvent,
    DecidedEvent,
    DeclareEvent,
    DeferredEvent,
    DelegateEvent,
    EndedEvent,
    Event,
    ExecuteEvent,
    FinishedEvent,
    HandledEvent,
    InformEvent,
    InterruptedEvent,
    LogEntry,
    NoReplyEvent,
    OutcomeEvent,
    PhaticEvent,
    ProposedEvent,
    RefusedEvent,
    ReplyEvent,
    ReplyProgressEvent,
    ReplyRefusedEvent,
    ReplyStartedEvent,
    ResumedEvent,
    SaidEvent,
    SendFailedEvent,
    SentEvent,
    SuggestionEvent,
    TurnLimitEvent,
)
from .log import EventLog
from .records import (
    Accept,
    ActionSpec,
    Ask,
    Defer,
    Dismiss,
    Edit,
    Issue,
    Say,
    TurnResult,
    as_action_spec,
    as_decision,
    as_issue,
)
from .state import DECIDING, ConversationState, OpenSuggestion

if TYPE_CHECKING:
    from ..stores.base import Store

logger = logging.getLogger("dial_runtime")

#: The phatic signal with which an agent ends the conversation.
SESSION_COMPLETE = "session-complete"

#: Final turn-loop states as ``TurnResult.status`` spells them.
RESULT_STATUS = {
    "idle": "idle",
    "no_reply": "no-reply",
    "turn_limit": "turn-limit",
    "ended": "ended",
    "awaiting": "awaiting",
}

#: The hint of an outcome whose action may or may not have taken effect.
UNKNOWN_EFFECT = "The turn stopped while the action ran; its effect is unknown."


async def _call(function: Callable[..., Any], *args: Any) -> Any:
    """Call a plain or coroutine function and return its result."""
    result = function(*args)
    if _awaitable(result):
        result = await result
    return result


def _awaitable(value: object) -> bool:
    """``inspect.isawaitable`` without its ABC check: a coroutine, an object whose type has ``__await__``, or a
    generator-based coroutine."""
    kind = type(value)
    return kind is CoroutineType or _awaits(kind) or (kind is GeneratorType and inspect.isawaitable(value))


#: Whether a type has ``__await__``, by type (at most 256, then started over).
_AWAITS: dict[type, bool] = {}


def _awaits(kind: type) -> bool:
    """Whether ``kind`` has ``__await__``, read once per type: a type without the attribute answers ``hasattr``
    by raising and clearing an AttributeError, which costs more than the rest of the check."""
    known = _AWAITS.get(kind)
    if known is None:
        if len(_AWAITS) >= 256:
            _AWAITS.clear()
        known = _AWAITS[kind] = hasattr(kind, "__await__")
    return known


def _require(obj: object, role: str, method: str) -> None:
    if not callable(getattr(obj, method, None)):
        raise TypeError(f"Conversation: {role} needs a {method}() method")


def _json_text(text: str) -> tuple[Any, str | None]:
    """The JSON value of a bare declare body, or ``(None, reason)`` when it is not JSON."""
    try:
        return json.loads(text), None
    except ValueError as error:
        return None, f"the payload is not valid JSON ({error})"


def _payload_value(element: Suggest | Declare) -> tuple[Any, str | None]:
    """The value of an element's ``dial-payload``: its JSON, or its text when its type is not JSON."""
    text = element.payload_text or ""
    if element.payload is not None:
        return element.payload, None
    if is_json_type(element.payload_type):
        return _json_text(text)
    return text, None


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _text_attribute(error: BaseException, name: str) -> str | None:
    value = getattr(error, name, None)
    return None if value is None else str(value)


class Conversation:
    """One conversation between a person and an agent that speaks DIAL.

    ``agent.send(message)``, ``human.decide(suggestion)``, ``human.answer(ask)`` and ``domain.run(action,
    payload)`` may be plain or coroutine functions; ``domain.validate``, ``domain.preview`` and
    ``domain.context`` are plain. ``timeout`` bounds each wait for the agent and ``decide_timeout`` each
    decision, in seconds (``None``: no bound). ``log`` rebuilds a conversation from its entries (numbered from 1,
    else ``ValueError``); ``store`` and ``conversation_id`` make it durable (see :meth:`open`).
    """

    def __init__(
        self,
        *,
        agent: Any,
        domain: Any,
        human: Any,
        on_event: Callable[[Event], object] | None = None,
        timeout: float | None = 90.0,
        max_turns: int = 8,
        decide_timeout: float | None = None,
        log: Iterable[LogEntry] = (),
        store: Store | None = None,
        conversation_id: str | None = None,
    ) -> None:
        _require(agent, "agent", "send")
        _require(human, "human", "decide")
        _require(domain, "domain", "run")
        if (store is None) != (conversation_id is None):
            raise TypeError("Conversation: a store needs a conversation_id, and a conversation_id a store")
        self.agent = agent
        self.domain = domain
        self.human = human
        self.on_event = on_event
        self.timeout = timeout
        self.max_turns = max_turns
        self.decide_timeout = decide_timeout
        self.id = conversation_id
        self._store = store
        self._actions: Mapping[str, Any] = getattr(domain, "actions", None) or {}
        self._specs: dict[str, ActionSpec] = {}
        self._log = EventLog(log)
        self._stored = len(self._log) if store is None else 0
        self._state = ConversationState.fold(self._log.events)
        self._in_call = False
        self._writing: tuple[object, anyio.Lock] | None = None
        if store is None:
            self._recover()

    @classmethod
    async def open(cls, store: Store, conversation_id: str, **options: Any) -> Conversation:
        """Open a durable conversation: rebuild its state by folding its stored log (a new id starts a new one).

        A call the previous process did not finish is closed the way a crash leaves it: an action that had
        started and has no result ends ``failed`` with code ``interrupted`` (it is never run again); suggestions
        and asks that were waiting for the person wait on, as if deferred (see :meth:`decide`); everything owed
        to the agent stays owed. ``options`` are the constructor's.
        """
        conversation = cls(store=store, conversation_id=conversation_id, **options)
        async with conversation._driving():
            pass
        return conversation

    @property
    def log(self) -> tuple[LogEntry, ...]:
        """Every event so far, in order: the conversation's state is a fold over it."""
        return tuple(self._log.entries())

    @property
    def facts(self) -> dict[str, Any]:
        """Facts the agent declared (unpaired ``dial-declare``), by context key; a later declare overwrites."""
        return dict(self._state.facts)

    @property
    def ended(self) -> bool:
        """Whether the conversation has ended."""
        return self._state.ended

    @property
    def owed(self) -> tuple[Outcome, ...]:
        """Outcomes the agent has not been told yet; they go with the next message."""
        return tuple(self._state.owed_outcomes)

    @property
    def pending(self) -> tuple[Any, ...]:
        """The suggestions and asks waiting for a deferred decision or answer."""
        return self._state.pending()

    def end(self) -> None:
        """End the conversation: the current reply (if any) is handled to its end, and no turn follows.

        With a store, the ending is written with the current call, or by :meth:`flush` between calls.
        """
        self._record(EndedEvent(reason="end() was called"))

    async def flush(self) -> None:
        """Write what the log holds beyond the store's copy (a no-op without a store); one write at a time."""
        if self._store is None or self._stored >= len(self._log):
            return
        async with self._writing_lock():
            written = len(self._log)
            if self._stored < written:
                await self._store.append(
                    self.id or "", self._log.entries(self._stored, written), expected_seq=self._stored
                )
                self._stored = written

    def _writing_lock(self) -> anyio.Lock:
        """The lock that keeps writes in order, made for the event loop running now (a lock binds to its loop)."""
        token = anyio.lowlevel.current_token()
        if self._writing is None or self._writing[0] != token:
            self._writing = (token, anyio.Lock(fast_acquire=True))
        return self._writing[1]

    async def say(self, text: str | None = "") -> TurnResult:
        """Send the person's words (with whatever is owed) and run turns until the agent needs nothing back.

        Returns at once with status ``"ended"`` after the conversation ended (the words are logged, nothing is
        sent), and with ``"idle"`` and no turn when there are no words and nothing is owed. Words said while
        suggestions await a deferred decision supersede them. Raises :class:`ConversationBusy` while another call
        drives the conversation, and the original exception of a failed send.
        """
        words = text or ""
        async with self._driving():
            if self._state.loop == "awaiting" and not self.ended:
                self._record(ResumedEvent(call="say"))
                _Run(self).abandon("the person said something else")
                self._record(FinishedEvent(status="interrupted", turns=self._state.turn))
            self._record(SaidEvent(text=words))
            if self.ended:
                return TurnResult(status="ended", turns=0)
            if not words and not self._state.owes():
                self._record(FinishedEvent(status="idle", turns=0))
                return TurnResult(status="idle", turns=0)
            return await _Run(self, words).drive()

    async def decide(self, suggestion_id: str, decision: object, *, by: str | None = None) -> TurnResult:
        """Take the person's deferred decision on a suggestion and carry on with the conversation.

        ``decision`` is ``Accept()``, ``Dismiss()``, ``Edit(payload)`` or ``Say(text)`` (or their dict forms).
        Once nothing is pending the turn loop continues, and the call returns its ``TurnResult``; a refused edit
        leaves the suggestion pending with its issue (status ``awaiting``). Raises ``DialError`` and changes
        nothing when the suggestion is not awaiting a decision.
        """
        chosen = as_decision(decision)
        async with self._driving():
            opened = self._state.open_suggestions.get(suggestion_id)
            if opened is None or not opened.deferred:
                raise DialError(f"Conversation: suggestion {suggestion_id!r} is not awaiting a decision")
            self._record(ResumedEvent(call="decide"))
            run = _Run(self)
            return await run.drive(run.decided(opened, chosen, by))

    async def answer(self, ask_id: str, text: str | None, *, by: str | None = None) -> TurnResult:
        """Take the person's deferred answer to an ask and carry on (an empty answer: the question stands)."""
        async with self._driving():
            if ask_id not in self._state.open_asks:
                raise DialError(f"Conversation: ask {ask_id!r} is not awaiting an answer")
            self._record(ResumedEvent(call="answer"))
            self._record(AnsweredEvent(ask_id=ask_id, text=text or "", by=by))
            return await _Run(self).drive()

    async def resume(self) -> TurnResult:
        """Carry on with a reply whose handling a crash cut short, once nothing awaits the person."""
        async with self._driving():
            if self._state.loop != "awaiting":
                return TurnResult(status="idle", turns=0)
            self._record(ResumedEvent(call="resume"))
            return await _Run(self).drive()

    def _driving(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the conversation for one call: in this process, and in the store across processes."""
        if self._in_call:
            raise ConversationBusy("Conversation: a call is already driving this conversation")
        return _InProcess(self) if self._store is None else self._driving_stored()

    @contextlib.asynccontextmanager
    async def _driving_stored(self) -> AsyncIterator[None]:
        """Hold a stored conversation: its lock, what others stored since, recovery, and a last write."""
        assert self._store is not None
        self._in_call = True
        try:
            async with self._store.lock(self.id or ""):
                await self._catch_up()
                try:
                    self._recover()
                    yield
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.flush()
        finally:
            self._in_call = False

    async def _catch_up(self) -> None:
        """Fold in what other workers appended to the stored log since this object last saw it.

        Events this object recorded between calls (``end()``) and has not written yet go after them.
        """
        assert self._store is not None
        fresh = await self._store.read(self.id or "", after_seq=self._stored)
        if not fresh:
            return
        local = self._log.events[self._stored :]
        if local:
            self._log.truncate(self._stored)
            self._state = ConversationState.fold(self._log.events)
        for entry in fresh:
            self._log.add_entry(entry)
            self._state.apply(entry.event)
        self._stored = len(self._log)
        for event in local:
            self._record(event)

    def _recover(self) -> None:
        """Close a call that a dead process left open, as :meth:`open` describes."""
        state = self._state
        if state.life != "in_turn":
            return
        run = _Run(self)
        for opened in list(state.open_suggestions.values()):
            if opened.state in ("running", "handing_off"):
                run.interrupt(opened, "the process stopped")
        if state.loop == "handling":
            for opened in state.open_suggestions.values():
                if opened.state in DECIDING and not opened.deferred:
                    self._record(DeferredEvent(subject_id=opened.id, kind="suggestion"))
            for ask_id in list(state.asked):
                self._record(DeferredEvent(subject_id=ask_id, kind="ask"))
            self._record(FinishedEvent(status="awaiting", turns=state.turn))
        else:
            self._record(InterruptedEvent(turn=state.turn, reason="the process stopped"))
            self._record(FinishedEvent(status="interrupted", turns=state.turn))

    def _record(self, event: Event) -> None:
        """Fold an event into the state and append it to the log (the state refuses it first if it must)."""
        self._state.apply(event)
        log = self._log
        log.events.append(event)
        log.times.append(time.time())

    def _emit(self, event: Event) -> None:
        """Record an event and show it to ``on_event``, whose exceptions are logged and go no further."""
        self._record(event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                logger.exception("on_event raised for a %s event; the conversation goes on", event.type)

    def _spec(self, action: str) -> ActionSpec | None:
        spec = self._specs.get(action)
        if spec is None:
            declared = self._actions.get(action) if isinstance(self._actions, (dict, Mapping)) else None
            if declared is None:
                return None
            spec = self._specs[action] = as_action_spec(declared)
        return spec

    def _validate(self, action: str, payload: Any) -> Issue | None:
        validate = getattr(self.domain, "validate", None)
        return None if validate is None else as_issue(validate(action, payload))

    def _preview(self, action: str, payload: Any) -> str:
        preview = getattr(self.domain, "preview", None)
        if preview is None:
            return action
        try:
            text = preview(action, payload)
        except Exception:
            logger.exception("domain.preview raised for %r; showing the action name", action)
            return action
        return str(text) if text else action

    def _compose(self, words: str) -> str:
        """The message of a turn: outcomes and refusals owed, the domain's context, then the words."""
        state = self._state
        parts = []
        if state.owed_outcomes:
            parts.append(outcome_reply(state.owed_outcomes))
        parts.extend(refusal_reply(refusal.reply_id, refusal.reason) for refusal in state.owed_refusals)
        context = getattr(self.domain, "context", None)
        if context is not None:
            text = context()
            if text:
                parts.append(str(text))
        spoken = [*state.owed_words, words] if words else state.owed_words
        if spoken:
            parts.append("\n\n".join(spoken))
        return "\n\n".join(parts)


class _InProcess:
    """Holds a conversation without a store for one call (what ``_driving`` is without the store's part)."""

    __slots__ = ("conversation",)

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation

    async def __aenter__(self) -> None:
        self.conversation._in_call = True

    async def __aexit__(self, *exc_info: object) -> None:
        self.conversation._in_call = False


class _Run:
    """One call's work on the turn loop, whose state it reads from the conversation's fold."""

    def __init__(self, conversation: Conversation, words: str = "") -> None:
        self.conversation = conversation
        self.state = conversation._state
        self.words = words
        self.outcomes: list[Outcome] = []
        self.streaming: StreamParser | None = None
        self.streamed_logged = 0  # how much of the streamed reply's text ``reply-progress`` events hold

    async def drive(self, first: Any = None) -> TurnResult:
        """Run the turn loop (after ``first``, a step that must happen first) until this call is done."""
        conversation = self.conversation
        try:
            if first is not None:
                await first
            status = await self._loop()
        except BaseException as error:
            if not TURN_LOOP.is_final(self.state.loop):
                self.abandon(_reason(error))
                conversation._record(InterruptedEvent(turn=self.state.turn, reason=_reason(error)))
            conversation._record(FinishedEvent(status="interrupted", turns=self.state.turn))
            raise
        turns = conversation.max_turns if status == "turn_limit" else self.state.turn
        result = RESULT_STATUS[status]
        conversation._record(FinishedEvent(status=result, turns=turns))
        return TurnResult(
            status=result,
            turns=turns,
            outcomes=tuple(self.outcomes),
            pending=self.state.pending() if status == "awaiting" else (),
        )

    async def _loop(self) -> str:
        conversation, state = self.conversation, self.state
        while True:
            if state.loop == "composing":
                turn = state.turn + 1
                if TURN_LOOP.fire(state.loop, "start_turn", out_of_turns=turn > conversation.max_turns) != (
                    "awaiting_reply"
                ):
                    conversation._emit(TurnLimitEvent(turns=conversation.max_turns))
                    return state.loop
                message = conversation._compose(self.words)
                self.words = ""
                conversation._emit(SentEvent(turn=turn, message=message))
                await conversation.flush()
                if callable(getattr(conversation.agent, "stream", None)):
                    if not await self._stream(message):
                        return state.loop
                else:
                    reply = await self._send(message)
                    if reply is None:
                        return state.loop
                    conversation._emit(ReplyEvent(turn=turn, text=reply))
            await self._handle()
            if state.awaits_person():
                return "awaiting"
            conversation._record(HandledEvent(turn=state.turn))
            if TURN_LOOP.is_final(state.loop):
                return state.loop

    async def _send(self, message: str) -> str | None:
        """The agent's reply, or ``None`` when the deadline passed (the loop is then in ``no_reply``)."""
        conversation = self.conversation
        timeout = conversation.timeout
        try:
            reply = conversation.agent.send(message)
            if _awaitable(reply):
                if timeout is None:
                    reply = await reply
                else:
                    with anyio.move_on_after(timeout) as scope:
                        reply = await reply
                    if scope.cancelled_caught:
                        error = f"The agent didn't reply within {timeout:g}s"
                        conversation._emit(NoReplyEvent(turn=self.state.turn, error=error))
                        return None
        except Exception as error:
            conversation._record(SendFailedEvent(turn=self.state.turn, error=_reason(error)))
            raise
        return "" if reply is None else str(reply)

    async def _stream(self, message: str) -> bool:
        """Stream the agent's reply, handling each speech act as soon as it is complete; ``False``: no reply.

        The whole reply is recorded (and written to the store) as soon as its last chunk is in, while its
        elements may still be waiting for the person.

        The deadline covers the stream until its first chunk: before that, a deadline that passes is no reply
        and an error is a failed send. A stream that breaks off later ends the reply where it stopped. The rest
        of the reply (elements the early view could not read, prose after the envelope) is handled afterwards
        from the whole text, as for a reply that was not streamed.
        """
        conversation, state = self.conversation, self.state
        parser = self.streaming = StreamParser()
        self.streamed_logged = 0
        arrived: list[Element] = []
        sender, receiver = anyio.create_memory_object_stream[int](math.inf)
        answering = anyio.Event()
        started: list[bool] = []
        failure: list[BaseException] = []

        async def produce() -> None:
            with sender:
                try:
                    async for chunk in conversation.agent.stream(message):
                        if not started:
                            started.append(True)
                            conversation._record(ReplyStartedEvent(turn=state.turn))
                            answering.set()
                        completed = parser.feed(chunk)
                        if completed:
                            arrived.extend(completed)
                            sender.send_nowait(len(arrived))
                    if not started:
                        started.append(True)
                        conversation._record(ReplyStartedEvent(turn=state.turn))
                except Exception as error:
                    failure.append(error)
                finally:
                    answering.set()
                if started:
                    conversation._emit(ReplyEvent(turn=state.turn, text=parser.text))
                    await conversation.flush()

        timeout = conversation.timeout
        handling_error: Exception | None = None
        with receiver:
            async with anyio.create_task_group() as group:
                group.start_soon(produce)
                with anyio.move_on_after(math.inf if timeout is None else timeout):
                    await answering.wait()
                try:
                    if started:
                        await self._consume(parser, arrived, receiver)
                except Exception as error:
                    handling_error = error
                group.cancel_scope.cancel()
        if handling_error is not None:
            raise handling_error
        if not started:
            if failure:
                conversation._record(SendFailedEvent(turn=state.turn, error=_reason(failure[0])))
                raise failure[0]
            conversation._emit(NoReplyEvent(turn=state.turn, error=f"The agent didn't reply within {timeout:g}s"))
            return False
        return True

    async def _consume(
        self, parser: StreamParser, arrived: list[Element], receiver: MemoryObjectReceiveStream[int]
    ) -> None:
        """Handle streamed elements in order; a suggest without its own payload waits for what follows it."""
        available, done = 0, False
        index = max(self.state.cursor + 1, 0)
        prose_shown = False
        with receiver:
            while True:
                if not prose_shown and parser.started:
                    prose_shown = True
                    if parser.prose_before and parser.prose_before.strip():
                        self.conversation._emit(InformEvent(text=parser.prose_before.strip(), element=-1))
                ready = index < available and (
                    not isinstance(arrived[index], Suggest)
                    or arrived[index].payload_text is not None  # type: ignore[union-attr]
                    or index + 1 < available
                    or done
                )
                if ready:
                    element = arrived[index]
                    if isinstance(element, Suggest):
                        index = await self._suggest(arrived[:available], index)
                    elif isinstance(element, AskElement):
                        await self._ask(element, index)
                        index += 1
                    else:
                        _HANDLERS[element.type](self, element, index)
                        index += 1
                    continue
                if done:
                    break
                try:
                    available = await receiver.receive()
                except anyio.EndOfStream:
                    done = True
        trailing = parser.prose_after()
        if prose_shown and trailing:
            self.conversation._emit(InformEvent(text=trailing))

    def _elements(self) -> tuple[Element, ...]:
        """The current reply's elements, or none after recording why it cannot be used or has no envelope."""
        conversation, state = self.conversation, self.state
        reply = state.reply or ""
        try:
            envelope = parse(reply, schema=False)
        except DialSizeError as error:
            return self._refuse(str(error))
        if envelope is None:
            text = reply.strip()
            if text and state.cursor < -1:
                conversation._emit(InformEvent(text=text, element=-1))
            return ()
        if not envelope.elements:
            checked = parse(reply)  # with the schema's findings, which may be all there is to say about it
            if checked is not None and checked.issues:
                return self._refuse("; ".join(issue.message for issue in checked.issues))
        if state.cursor < -1:
            start = reply.find(envelope.raw)
            prose = (reply[:start] + reply[start + len(envelope.raw) :]).strip()
            if prose:
                conversation._emit(InformEvent(text=prose, element=-1))
        return envelope.elements

    def _refuse(self, reason: str) -> tuple[Element, ...]:
        if not self.state.owed_refusals:
            reply_id = f"reply-{self.state.replies}"
            self.conversation._record(
                ReplyRefusedEvent(turn=self.state.turn, reply_id=reply_id, reason=reason, element=-1)
            )
        return ()

    async def _handle(self) -> None:
        """Handle the reply's elements in document order, from the first one not yet accounted for."""
        elements = self._elements()
        index = max(self.state.cursor + 1, 0)
        while index < len(elements):
            element = elements[index]
            if isinstance(element, Suggest):
                index = await self._suggest(elements, index)
            elif isinstance(element, AskElement):
                await self._ask(element, index)
                index += 1
            else:
                _HANDLERS[element.type](self, element, index)
                index += 1

    def _inform(self, element: Any, index: int) -> None:
        if element.text:
            act = "acknowledge" if element.type == "dial-acknowledge" else "inform"
            self.conversation._emit(InformEvent(text=element.text, act=act, element=index))

    async def _ask(self, element: AskElement, index: int) -> None:
        conversation, state = self.conversation, self.state
        answer: Callable[[Ask], Any] | None = getattr(conversation.human, "answer", None)
        asked = state.instead is None and answer is not None
        ask = Ask(
            id=element.id or f"ask-{state.asks + 1}",
            text=element.text or "",
            response_type=element.response_type,
            options=element.options,
            timeout=element.timeout,
        )
        conversation._emit(
            AskEvent(
                id=ask.id,
                text=ask.text,
                response_type=ask.response_type,
                options=ask.options,
                timeout=ask.timeout,
                asked=asked,
                element=index,
            )
        )
        if answer is None or not asked:
            return
        given, expired = await self._consult(answer, ask, ask.timeout)
        if isinstance(given, Defer):
            conversation._record(DeferredEvent(subject_id=ask.id, kind="ask"))
            return
        text = "" if given is None else str(given)
        conversation._record(AnsweredEvent(ask_id=ask.id, text=text, expired=expired))

    def _declare(self, element: Declare, index: int) -> None:
        if element.context_key is None:
            return
        if element.payload_text is not None:
            value, problem = _payload_value(element)
            if problem is not None:
                value = element.payload_text
        else:
            value, problem = _json_text(element.text or "")
            if problem is not None:
                value = element.text
        self.conversation._emit(DeclareEvent(context_key=element.context_key, value=value, element=index))

    def _phatic(self, element: Phatic, index: int) -> None:
        if element.signal:
            self.conversation._emit(PhaticEvent(signal=element.signal, element=index))
            if element.signal == SESSION_COMPLETE and not self.conversation.ended:
                self.conversation._record(EndedEvent(reason=f"the agent signalled {SESSION_COMPLETE}"))

    def _delegate(self, element: Delegate, index: int) -> None:
        self.conversation._emit(
            DelegateEvent(
                to=element.to or "",
                intent=element.intent,
                text=element.text,
                payload=element.payload,
                element=index,
            )
        )

    def _execute(self, element: Execute, index: int) -> None:
        self.conversation._emit(ExecuteEvent(id=element.id, steps=element.steps, element=index))

    def _payload(self, elements: Sequence[Element], index: int) -> tuple[Any, str | None, int]:
        """The suggestion's payload, why it is unusable (or ``None``), and the index after what it used."""
        element = elements[index]
        assert isinstance(element, Suggest)
        if element.payload_text is not None:
            return (*_payload_value(element), index + 1)
        following = elements[index + 1] if index + 1 < len(elements) else None
        if not isinstance(following, Declare):
            return {}, None, index + 1
        if following.payload_text is not None:
            return (*_payload_value(following), index + 2)
        if not following.text:
            return {}, None, index + 2
        return (*_json_text(following.text), index + 2)

    def _propose(self, element: Suggest, payload: Any, last: int) -> OpenSuggestion:
        """Record a suggestion read from the reply (``last``: the last element it used; ``payload`` JSON-ready) and
        return it open."""
        state = self.state
        numbered = not element.id
        ident = element.id or f"sg-{state.suggestions_numbered + 1}"
        self.conversation._record(
            ProposedEvent(
                id=ident,
                action=element.action or "",
                payload=payload,
                numbered=numbered,
                text=element.text or "",
                element=last,
            )
        )
        return state.open_suggestions[ident]

    async def _suggest(self, elements: Sequence[Element], index: int) -> int:
        """Run one suggestion's lifecycle to its outcome (or to a deferral); return the next element's index."""
        conversation = self.conversation
        element = elements[index]
        assert isinstance(element, Suggest)
        payload, problem, after = self._payload(elements, index)
        opened = self._propose(element, to_json_ready(payload), after - 1)
        spec = conversation._spec(opened.action)
        if spec is None:
            self.finish(opened, "reject", code="unknown-action", hint=f"There is no action '{opened.action}'.")
            return after
        if problem is not None:
            self.finish(opened, "reject", code="invalid-payload", hint=problem)
            return after
        issue = conversation._validate(opened.action, payload)
        if issue is not None:
            self.finish(opened, "reject", code=issue.code, field=issue.field, hint=issue.hint)
            return after
        preview = conversation._preview(opened.action, payload)
        if self.state.instead is not None:
            self.finish(opened, "supersede", preview=preview)
            return after
        conversation._emit(
            SuggestionEvent(
                id=opened.id,
                action=opened.action,
                text=element.text or "",
                payload=opened.payload,
                preview=preview,
                destructive=spec.destructive,
                mutates=spec.mutates,
                handoff=spec.handoff,
            )
        )
        if opened.state in DECIDING:
            await self._decide(opened)
        else:
            await self._run(opened)
        return after

    async def _consult(
        self, function: Callable[[Any], Any], question: Any, deadline: float | None
    ) -> tuple[Any, bool]:
        """The person's decision or answer, and whether ``deadline`` (seconds) passed without one.

        A plain function is taken as an instant reply: it is called at once, and what it returns is written with
        what follows. A reply that has to be awaited is awaited only once the log is written, so a process that
        dies while the person thinks leaves the question waiting in the store (see ``Conversation.open``); a
        streamed agent reply still arriving is logged as far as it got first (``reply-progress``: what arrived
        since the last one), so the agent's words survive that death too.
        """
        reply = function(question)
        if not _awaitable(reply):
            return reply, False
        streaming, state = self.streaming, self.state
        if streaming is not None and state.reply != streaming.text:  # the reply is still arriving
            arrived = streaming.text[self.streamed_logged :]
            if arrived:
                self.streamed_logged += len(arrived)
                self.conversation._record(ReplyProgressEvent(turn=state.turn, text=arrived))
        try:
            await self.conversation.flush()
        except BaseException:
            if isinstance(reply, CoroutineType):
                reply.close()
            raise
        if deadline is None:
            return await reply, False
        with anyio.move_on_after(deadline):
            return await reply, False
        return None, True

    async def _decide(self, opened: OpenSuggestion) -> None:
        """Put the suggestion to the person until it ends or is deferred."""
        conversation = self.conversation
        while opened.id in self.state.open_suggestions:
            raw, expired = await self._consult(
                conversation.human.decide, opened.suggestion(), conversation.decide_timeout
            )
            if expired:
                conversation._record(DecidedEvent(suggestion_id=opened.id, decision="expire"))
                self.finish(opened, "expire", expired=True)
                return
            decision = as_decision(raw)
            if isinstance(decision, Defer):
                conversation._record(DeferredEvent(subject_id=opened.id, kind="suggestion"))
                return
            await self._apply(opened, decision)

    async def decided(self, opened: OpenSuggestion, decision: Any, by: str | None) -> None:
        """Apply a decision that arrived later; a refusal leaves the suggestion deferred again."""
        if isinstance(decision, Defer):
            self.conversation._record(DeferredEvent(subject_id=opened.id, kind="suggestion"))
            return
        await self._apply(opened, decision, by=by)
        if opened.id in self.state.open_suggestions and opened.state in DECIDING:
            self.conversation._record(DeferredEvent(subject_id=opened.id, kind="suggestion"))

    async def _apply(self, opened: OpenSuggestion, decision: Any, *, by: str | None = None) -> None:
        """Apply one decision of the person's: end the suggestion, refuse its payload, or run it."""
        conversation = self.conversation
        if isinstance(decision, Dismiss):
            conversation._record(DecidedEvent(suggestion_id=opened.id, decision="dismiss", by=by))
            self.finish(opened, "dismiss")
            return
        if isinstance(decision, Say):
            conversation._record(DecidedEvent(suggestion_id=opened.id, decision="say", text=decision.text, by=by))
            self.finish(opened, "supersede")
            for other in list(self.state.open_suggestions.values()):
                if other.deferred:
                    self.finish(other, "supersede")
            return
        if isinstance(decision, Edit):
            conversation._record(
                DecidedEvent(
                    suggestion_id=opened.id,
                    decision="edit",
                    payload=to_json_ready(decision.payload),
                    previous=opened.payload,
                    by=by,
                )
            )
        else:
            assert isinstance(decision, Accept)
            conversation._record(DecidedEvent(suggestion_id=opened.id, decision="accept", by=by))
        issue = conversation._validate(opened.action, opened.payload)
        if issue is None:
            await self._run(opened)
            return
        conversation._record(
            RefusedEvent(
                suggestion_id=opened.id,
                payload=opened.payload,
                code=issue.code,
                field=issue.field,
                hint=issue.hint,
            )
        )
        if SUGGESTION.is_final(opened.state):
            self.finish(opened, None, code=issue.code, field=issue.field, hint=issue.hint, edited=opened.edited)

    async def _run(self, opened: OpenSuggestion) -> None:
        """Run the action, with its start on the log first; its success or exception decides the outcome."""
        conversation = self.conversation
        edited, payload = opened.edited, opened.payload
        preview = conversation._preview(opened.action, payload) if edited else opened.preview
        conversation._record(
            ActionStartedEvent(
                suggestion_id=opened.id, action=opened.action, payload=payload, preview=preview, edited=edited
            )
        )
        await conversation.flush()
        try:
            result = await _call(conversation.domain.run, opened.action, payload)
        except Exception as error:
            self.finish(
                opened,
                "fail",
                error=str(error) or type(error).__name__,
                code=_text_attribute(error, "code"),
                field=_text_attribute(error, "field"),
                hint=_text_attribute(error, "hint"),
                edited=edited,
            )
            return
        self.finish(opened, "succeed", result=to_json_ready(result), edited=edited)

    def finish(
        self, opened: OpenSuggestion, event: str | None, *, preview: str | None = None, **fields: Any
    ) -> None:
        """Report the outcome the suggestion reaches by ``event`` (``None``: the state it is already in)."""
        final = opened.state if event is None else SUGGESTION.fire(opened.state, event)
        shown = opened.preview if preview is None else preview
        self.conversation._emit(
            OutcomeEvent(
                id=opened.id,
                action=opened.action,
                status=OUTCOME_STATUS[final],
                preview="" if final == "invalid" else shown,
                **fields,
            )
        )
        self.outcomes.append(self.state.owed_outcomes[-1])  # the Outcome the fold made of the event

    def interrupt(self, opened: OpenSuggestion, reason: str) -> None:
        """End a suggestion its turn no longer carries (the machine's ``interrupt``): an action that was running
        fails as ``interrupted``, its effect unknown; anything else is superseded."""
        if OUTCOME_STATUS[SUGGESTION.fire(opened.state, "interrupt")] == "failed":
            self.finish(opened, "interrupt", error=reason, code="interrupted", hint=UNKNOWN_EFFECT)
        else:
            self.finish(opened, "interrupt")

    def abandon(self, reason: str) -> None:
        """Give every open suggestion, and the reply's unhandled ones, their outcome after an interruption.

        An action that was running fails with code ``interrupted`` (its effect is unknown); every other
        suggestion is superseded; asks waiting for an answer are closed without one.
        """
        state = self.state
        for opened in list(state.open_suggestions.values()):
            self.interrupt(opened, reason)
        for ask_id in [*state.asked, *state.open_asks]:
            self.conversation._record(AnsweredEvent(ask_id=ask_id, text=""))
        received = self.streaming.text if self.streaming is not None else state.reply
        try:
            elements = parse(received or "", schema=False) if state.loop in ("handling", "awaiting") else None
        except DialSizeError:
            elements = None
        remaining = elements.elements if elements is not None else ()
        index = max(state.cursor + 1, 0)
        while index < len(remaining):
            element = remaining[index]
            if isinstance(element, Suggest):
                payload, _, after = self._payload(remaining, index)
                self.interrupt(self._propose(element, to_json_ready(payload), after - 1), reason)
                index = after
            else:
                index += 1


#: The handlers of the speech acts that need no waiting (a suggest and an ask may wait for the person).
_HANDLERS: dict[str, Callable[[_Run, Any, int], None]] = {
    "dial-inform": _Run._inform,
    "dial-acknowledge": _Run._inform,
    "dial-declare": _Run._declare,
    "dial-phatic": _Run._phatic,
    "dial-delegate": _Run._delegate,
    "dial-execute": _Run._execute,
}

#: Every speech act the turn loop handles (a test holds it equal to the lenient XSD's set).
HANDLED_ELEMENTS = frozenset([*_HANDLERS, "dial-suggest", "dial-ask"])
