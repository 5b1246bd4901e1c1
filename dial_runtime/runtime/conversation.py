"""The driver: runs one conversation's turns, doing the I/O the machines and the state call for.

Every status comes from a compiled machine table (:mod:`dial_runtime.statemachines`); every change of state is an
event appended to the log and folded into :class:`~dial_runtime.runtime.state.ConversationState`. The driver
awaits the agent, the person and the domain under anyio cancel scopes, so it runs on trio and asyncio alike.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio

from ..errors import ConversationBusy, DialSizeError, IllegalTransition
from ..language.outcomes import Outcome, outcome_reply, refusal_reply, to_json_ready
from ..language.parser import extract_prose, parse
from ..language.records import AskElement, Declare, Delegate, Element, Execute, Phatic, Suggest, is_json_type
from ..statemachines import LIFE, NEEDS_REPLY, OUTCOME_STATUS, SUGGESTION, TURN_LOOP
from .events import (
    AnsweredEvent,
    AskEvent,
    DecidedEvent,
    DeclareEvent,
    DelegateEvent,
    EndedEvent,
    Event,
    ExecuteEvent,
    FinishedEvent,
    InformEvent,
    InterruptedEvent,
    LogEntry,
    NoReplyEvent,
    OutcomeEvent,
    PhaticEvent,
    ProposedEvent,
    ReplyEvent,
    ReplyRefusedEvent,
    SaidEvent,
    SendFailedEvent,
    SentEvent,
    SuggestionEvent,
    TurnLimitEvent,
)
from .records import (
    Accept,
    ActionSpec,
    Ask,
    Dismiss,
    Edit,
    Issue,
    Say,
    Suggestion,
    TurnResult,
    as_action_spec,
    as_decision,
    as_issue,
)
from .state import ConversationState

logger = logging.getLogger("dial_runtime")

#: The phatic signal with which an agent ends the conversation.
SESSION_COMPLETE = "session-complete"

#: Turn-loop statuses as ``TurnResult.status`` spells them.
RESULT_STATUS = {"idle": "idle", "no_reply": "no-reply", "turn_limit": "turn-limit", "ended": "ended"}


async def _call(function: Callable[..., Any], *args: Any) -> Any:
    """Call a plain or coroutine function and return its result."""
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


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


class Conversation:
    """One conversation between a person and an agent that speaks DIAL.

    ``agent.send(message)``, ``human.decide(suggestion)``, ``human.answer(ask)`` and ``domain.run(action,
    payload)`` may be plain or coroutine functions; ``domain.validate``, ``domain.preview`` and
    ``domain.context`` are plain. ``timeout`` bounds each wait for the agent and ``decide_timeout`` each
    decision, in seconds (``None``: no bound).
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
    ) -> None:
        _require(agent, "agent", "send")
        _require(human, "human", "decide")
        _require(domain, "domain", "run")
        self.agent = agent
        self.domain = domain
        self.human = human
        self.on_event = on_event
        self.timeout = timeout
        self.max_turns = max_turns
        self.decide_timeout = decide_timeout
        self._actions: Mapping[str, Any] = getattr(domain, "actions", None) or {}
        self._specs: dict[str, ActionSpec] = {}
        self._log: list[LogEntry] = list(log)
        self._state = ConversationState.fold(entry.event for entry in self._log)

    @property
    def log(self) -> tuple[LogEntry, ...]:
        """Every event so far, in order: the conversation's state is a fold over it."""
        return tuple(self._log)

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

    def end(self) -> None:
        """End the conversation: the current reply (if any) is handled to its end, and no turn follows."""
        self._record(EndedEvent(reason="end() was called"))

    async def say(self, text: str | None = "") -> TurnResult:
        """Send the person's words (with whatever is owed) and run turns until the agent needs nothing back.

        Returns at once with status ``"ended"`` after the conversation ended (the words are logged, nothing is
        sent), and with ``"idle"`` and no turn when there are no words and nothing is owed. Raises
        :class:`ConversationBusy` while another ``say`` runs, and the original exception of a failed send.
        """
        words = text or ""
        try:
            LIFE.fire(self._state.life, "begin")
        except IllegalTransition:
            raise ConversationBusy("Conversation: say() was called while another say() is running") from None
        self._record(SaidEvent(text=words))
        if self._state.ended:
            return TurnResult(status="ended", turns=0)
        if not words and not self._state.owes():
            self._record(FinishedEvent(status="idle", turns=0))
            return TurnResult(status="idle", turns=0)
        run = _Run(self, words)
        try:
            status = await run.turns()
        except BaseException:
            self._record(FinishedEvent(status="interrupted", turns=run.turn))
            raise
        turns = self.max_turns if status == "turn_limit" else run.turn
        self._record(FinishedEvent(status=RESULT_STATUS[status], turns=turns))
        return TurnResult(status=RESULT_STATUS[status], turns=turns, outcomes=tuple(run.outcomes))

    def _record(self, event: Event, *, notify: bool = False) -> None:
        """Append an event to the log, fold it into the state, and show it to ``on_event`` when asked."""
        self._log.append(LogEntry(seq=len(self._log) + 1, time=time.time(), event=event))
        self._state.apply(event)
        if notify and self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                logger.exception("on_event raised for a %s event; the conversation goes on", event.type)

    def _emit(self, event: Event) -> None:
        self._record(event, notify=True)

    def _spec(self, action: str) -> ActionSpec | None:
        spec = self._specs.get(action)
        if spec is None:
            declared = self._actions.get(action) if isinstance(self._actions, Mapping) else None
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


class _Flight:
    """The suggestion being worked on, so an interrupted turn can still give it its one outcome."""

    __slots__ = ("action", "id", "preview", "state")

    def __init__(self, ident: str, action: str) -> None:
        self.id = ident
        self.action = action
        self.preview = ""
        self.state = SUGGESTION.initial


class _Run:
    """One ``say``: its turns, the reply being handled, and this call's outcomes."""

    def __init__(self, conversation: Conversation, words: str) -> None:
        self.conversation = conversation
        self.words = words
        self.turn = 0
        self.outcomes: list[Outcome] = []
        self.loop = TURN_LOOP.initial
        self.instead: str | None = None
        self.flight: _Flight | None = None
        self.ending = False

    async def turns(self) -> str:
        """Run turns until the turn loop reaches a final state; return it.

        Whatever stops a turn early (the caller's cancellation, a callback that raised) leaves the loop
        ``cancelled``, logged as ``interrupted``, with every outcome produced so far owed to the agent.
        """
        try:
            return await self._loop()
        except BaseException as error:
            if not TURN_LOOP.is_final(self.loop):
                self.loop = TURN_LOOP.fire(self.loop, "cancel")
                self.conversation._record(InterruptedEvent(turn=self.turn, reason=_reason(error)))
            raise

    async def _loop(self) -> str:
        conversation = self.conversation
        while True:
            self.turn += 1
            self.loop = TURN_LOOP.fire(self.loop, "start_turn", out_of_turns=self.turn > conversation.max_turns)
            if self.loop == "turn_limit":
                conversation._emit(TurnLimitEvent(turns=conversation.max_turns))
                return self.loop
            message = conversation._compose(self.words if self.turn == 1 else "")
            conversation._emit(SentEvent(turn=self.turn, message=message))
            reply = await self._send(message)
            if reply is None:
                return self.loop
            self.loop = TURN_LOOP.fire(self.loop, "reply")
            conversation._emit(ReplyEvent(turn=self.turn, text=reply))
            self.instead = None
            flags = await self._handle(reply)
            if self.ending and not conversation.ended:
                conversation._record(EndedEvent(reason=f"the agent signalled {SESSION_COMPLETE}"))
            self.loop = TURN_LOOP.fire(self.loop, "handled", ending=conversation.ended, **flags)
            if TURN_LOOP.is_final(self.loop):
                return self.loop

    async def _send(self, message: str) -> str | None:
        """The agent's reply, or ``None`` when the deadline passed (the loop is then in ``no_reply``)."""
        conversation = self.conversation
        timeout = conversation.timeout
        try:
            if timeout is None:
                reply = await _call(conversation.agent.send, message)
            else:
                with anyio.move_on_after(timeout) as scope:
                    reply = await _call(conversation.agent.send, message)
                if scope.cancelled_caught:
                    self.loop = TURN_LOOP.fire(self.loop, "time_out")
                    conversation._emit(
                        NoReplyEvent(turn=self.turn, error=f"The agent didn't reply within {timeout:g}s")
                    )
                    return None
        except Exception as error:
            self.loop = TURN_LOOP.fire(self.loop, "send_fail")
            conversation._record(SendFailedEvent(turn=self.turn, error=_reason(error)))
            raise
        return "" if reply is None else str(reply)

    async def _handle(self, reply: str) -> dict[str, bool]:
        """Handle one reply's elements in document order; return the flags the turn loop decides on."""
        conversation = self.conversation
        outcomes_before = len(self.outcomes)
        try:
            envelope = parse(reply)
        except DialSizeError as error:
            return self._refuse(str(error))
        if envelope is None:
            text = reply.strip()
            if text:
                conversation._emit(InformEvent(text=text))
            return {}
        if not envelope.elements and envelope.issues:
            return self._refuse("; ".join(issue.message for issue in envelope.issues))
        prose = extract_prose(reply)
        if prose:
            conversation._emit(InformEvent(text=prose))
        elements = envelope.elements
        words_before = len(conversation._state.owed_words)
        index = 0
        try:
            while index < len(elements):
                element = elements[index]
                if isinstance(element, Suggest):
                    index = await self._suggest(elements, index)
                    continue
                await _HANDLERS[element.type](self, element)
                index += 1
        except BaseException as error:
            self._abandon(elements, index, _reason(error))
            raise
        new = self.outcomes[outcomes_before:]
        return {
            "words_pending": len(conversation._state.owed_words) > words_before,
            "needs_reply": any(outcome.status in NEEDS_REPLY for outcome in new),
        }

    def _refuse(self, reason: str) -> dict[str, bool]:
        conversation = self.conversation
        reply_id = f"reply-{conversation._state.replies}"
        conversation._record(ReplyRefusedEvent(turn=self.turn, reply_id=reply_id, reason=reason))
        return {"unusable_reply": True}

    async def _inform(self, element: Any) -> None:
        if element.text:
            act = "acknowledge" if element.type == "dial-acknowledge" else "inform"
            self.conversation._emit(InformEvent(text=element.text, act=act))

    async def _ask(self, element: AskElement) -> None:
        conversation = self.conversation
        ask = Ask(
            id=element.id or f"ask-{conversation._state.asks + 1}",
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
            )
        )
        answer = getattr(conversation.human, "answer", None)
        if self.instead is not None or answer is None:
            return
        expired = False
        if ask.timeout is None:
            given = await _call(answer, ask)
        else:
            given = None
            with anyio.move_on_after(ask.timeout) as scope:
                given = await _call(answer, ask)
            expired = scope.cancelled_caught
        text = "" if given is None else str(given)
        conversation._record(AnsweredEvent(ask_id=ask.id, text=text, expired=expired))

    async def _declare(self, element: Declare) -> None:
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
        self.conversation._emit(DeclareEvent(context_key=element.context_key, value=value))

    async def _phatic(self, element: Phatic) -> None:
        if element.signal:
            self.conversation._emit(PhaticEvent(signal=element.signal))
            if element.signal == SESSION_COMPLETE:
                self.ending = True

    async def _delegate(self, element: Delegate) -> None:
        self.conversation._emit(
            DelegateEvent(to=element.to or "", intent=element.intent, text=element.text, payload=element.payload)
        )

    async def _execute(self, element: Execute) -> None:
        self.conversation._emit(ExecuteEvent(id=element.id, steps=element.steps))

    def _propose(self, element: Suggest) -> _Flight:
        conversation = self.conversation
        numbered = not element.id
        ident = element.id or f"sg-{conversation._state.suggestions_numbered + 1}"
        action = element.action or ""
        conversation._record(ProposedEvent(id=ident, action=action, payload=None, numbered=numbered))
        self.flight = _Flight(ident, action)
        return self.flight

    def _payload(self, elements: tuple[Element, ...], index: int) -> tuple[Any, str | None, int]:
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

    async def _suggest(self, elements: tuple[Element, ...], index: int) -> int:
        """Run one suggestion's lifecycle to its outcome; return the index of the next element."""
        conversation = self.conversation
        element = elements[index]
        assert isinstance(element, Suggest)
        payload, problem, after = self._payload(elements, index)
        flight = self._propose(element)
        spec = conversation._spec(flight.action)
        if spec is None:
            self._end(flight, "reject", code="unknown-action", hint=f"There is no action '{flight.action}'.")
            return after
        if problem is not None:
            self._end(flight, "reject", code="invalid-payload", hint=problem)
            return after
        issue = conversation._validate(flight.action, payload)
        if issue is not None:
            self._end(flight, "reject", code=issue.code, field=issue.field, hint=issue.hint)
            return after
        flight.preview = conversation._preview(flight.action, payload)
        if self.instead is not None:
            self._end(flight, "supersede")
            return after
        conversation._emit(
            SuggestionEvent(
                id=flight.id,
                action=flight.action,
                text=element.text or "",
                payload=payload,
                preview=flight.preview,
                destructive=spec.destructive,
                mutates=spec.mutates,
                handoff=spec.handoff,
            )
        )
        if spec.handoff:
            self._fire(flight, "hand_off")
            await self._run(flight, payload)
        elif not spec.mutates:
            self._fire(flight, "run_read_only")
            await self._run(flight, payload)
        else:
            self._fire(flight, "present")
            await self._decide(flight, element, payload, spec)
        self.flight = None
        return after

    async def _decide(self, flight: _Flight, element: Suggest, payload: Any, spec: ActionSpec) -> None:
        """Put the suggestion to the person until it is dismissed, superseded, expired, refused or run."""
        conversation = self.conversation
        current, issue, edited = payload, None, False
        while True:
            suggestion = Suggestion(
                id=flight.id,
                action=flight.action,
                text=element.text or "",
                payload=current,
                preview=flight.preview,
                destructive=spec.destructive,
                issue=issue,
            )
            deadline = conversation.decide_timeout
            if deadline is None:
                decision = as_decision(await _call(conversation.human.decide, suggestion))
            else:
                raw: Any = None
                with anyio.move_on_after(deadline) as scope:
                    raw = await _call(conversation.human.decide, suggestion)
                if scope.cancelled_caught:
                    conversation._record(DecidedEvent(suggestion_id=flight.id, decision="expire"))
                    self._end(flight, "expire", expired=True)
                    return
                decision = as_decision(raw)
            if isinstance(decision, Dismiss):
                conversation._record(DecidedEvent(suggestion_id=flight.id, decision="dismiss"))
                self._end(flight, "dismiss")
                return
            if isinstance(decision, Say):
                conversation._record(DecidedEvent(suggestion_id=flight.id, decision="say", text=decision.text))
                self.instead = decision.text
                self._end(flight, "supersede")
                return
            if isinstance(decision, Edit):
                conversation._record(
                    DecidedEvent(suggestion_id=flight.id, decision="edit", payload=to_json_ready(decision.payload))
                )
                current, edited = decision.payload, True
            else:
                assert isinstance(decision, Accept)
                conversation._record(DecidedEvent(suggestion_id=flight.id, decision="accept"))
            issue = conversation._validate(flight.action, current)
            if issue is None:
                if edited:
                    flight.preview = conversation._preview(flight.action, current)
                self._fire(flight, "accept")
                await self._run(flight, current, edited=edited)
                return
            self._fire(flight, "refuse")
            if SUGGESTION.is_final(flight.state):
                self._outcome(flight, code=issue.code, field=issue.field, hint=issue.hint, edited=edited)
                return

    async def _run(self, flight: _Flight, payload: Any, *, edited: bool = False) -> None:
        """Run the action; its success or exception decides the outcome."""
        try:
            result = await _call(self.conversation.domain.run, flight.action, payload)
        except Exception as error:
            self._end(
                flight,
                "fail",
                error=str(error) or type(error).__name__,
                code=_text_attribute(error, "code"),
                field=_text_attribute(error, "field"),
                hint=_text_attribute(error, "hint"),
                edited=edited,
            )
            return
        self._end(flight, "succeed", result=to_json_ready(result), edited=edited)

    def _fire(self, flight: _Flight, event: str) -> None:
        flight.state = SUGGESTION.fire(flight.state, event)

    def _end(self, flight: _Flight, event: str, **fields: Any) -> None:
        """Fire the event that ends the suggestion and report its outcome."""
        self._fire(flight, event)
        self._outcome(flight, **fields)

    def _outcome(self, flight: _Flight, **fields: Any) -> None:
        outcome = Outcome(
            id=flight.id,
            action=flight.action,
            status=OUTCOME_STATUS[flight.state],
            preview="" if flight.state == "invalid" else flight.preview,
            **fields,
        )
        self.outcomes.append(outcome)
        self.conversation._emit(OutcomeEvent.of(outcome))

    def _abandon(self, elements: tuple[Element, ...], index: int, reason: str) -> None:
        """Give the suggestion in flight and the reply's remaining ones their outcome after an interruption."""
        flight = self.flight
        if flight is not None and not SUGGESTION.is_final(flight.state):
            if flight.state in ("running", "handing_off"):
                hint = "The turn stopped while the action ran; its effect is unknown."
                self._end(flight, "fail", error=reason, code="interrupted", hint=hint)
            else:
                self._end(flight, "supersede")
        self.flight = None
        for element in elements[index + 1 :]:
            if isinstance(element, Suggest):
                self._end(self._propose(element), "supersede")


_HANDLERS: dict[str, Callable[[_Run, Any], Any]] = {
    "dial-inform": _Run._inform,
    "dial-acknowledge": _Run._inform,
    "dial-ask": _Run._ask,
    "dial-declare": _Run._declare,
    "dial-phatic": _Run._phatic,
    "dial-delegate": _Run._delegate,
    "dial-execute": _Run._execute,
}

#: Every speech act the turn loop handles (a test holds it equal to the lenient XSD's set).
HANDLED_ELEMENTS = frozenset([*_HANDLERS, "dial-suggest"])


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _text_attribute(error: BaseException, name: str) -> str | None:
    value = getattr(error, name, None)
    return None if value is None else str(value)
