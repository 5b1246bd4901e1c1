"""A conversation's state as a fold over its event log: no I/O, no awaiting, no callbacks.

What the agent is owed (outcomes, refusals of unusable replies, words the person gave inside the conversation)
accumulates from the events that produce it and is cleared by the next ``reply`` event, because a reply means the
message carrying it arrived. So a send that fails, a deadline that passes or a crash leaves it owed without any
event having to say so, and after a reply what is owed is exactly what that reply produced.

The fold also follows the machines: the conversation's life, the turn loop of the call in progress, and every
suggestion that has no outcome yet (its lifecycle state, current payload, preview and last refusal), so a
conversation rebuilt from its log (in another process, after a crash) can take a deferred decision, or carry on
with the rest of a reply, exactly where the original stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..language.outcomes import Outcome
from ..statemachines import LIFE, NEEDS_REPLY, SUGGESTION, TURN_LOOP
from .events import (
    ActionStartedEvent,
    AnsweredEvent,
    AskEvent,
    DecidedEvent,
    DeclareEvent,
    DeferredEvent,
    EndedEvent,
    Event,
    FinishedEvent,
    InterruptedEvent,
    OutcomeEvent,
    ProposedEvent,
    RefusedEvent,
    ReplyEvent,
    ReplyRefusedEvent,
    ReplyStartedEvent,
    ResumedEvent,
    SentEvent,
    SuggestionEvent,
    TurnLimitEvent,
)
from .records import Ask, Issue, Suggestion

#: Declared keys the runtime itself uses to report outcomes; they never enter ``facts``.
OUTCOME_KEY_PREFIX = "outcome:"

#: The lifecycle states in which a suggestion waits for the person.
DECIDING = frozenset({"pending", "pending_refused_once", "pending_refused_twice"})


@attrs.define
class OpenSuggestion:
    """A suggestion without an outcome yet: where its lifecycle stands and what the person would see."""

    id: str
    action: str
    text: str
    payload: Any
    preview: str = ""
    destructive: bool = False
    mutates: bool = False
    handoff: bool = False
    state: str = SUGGESTION.initial
    issue: Issue | None = None
    edited: bool = False
    deferred: bool = False

    def suggestion(self) -> Suggestion:
        """The record the person decides on."""
        return Suggestion(
            id=self.id,
            action=self.action,
            text=self.text,
            payload=self.payload,
            preview=self.preview,
            destructive=self.destructive,
            issue=self.issue,
        )


@attrs.define
class ConversationState:
    """Everything a conversation remembers, kept current by :meth:`apply`."""

    life: str = LIFE.initial
    loop: str = TURN_LOOP.initial
    turn: int = 0
    owed_outcomes: list[Outcome] = attrs.Factory(list)
    owed_refusals: list[ReplyRefusedEvent] = attrs.Factory(list)
    owed_words: list[str] = attrs.Factory(list)
    suggestions_numbered: int = 0
    asks: int = 0
    replies: int = 0
    reply: str | None = None
    cursor: int = -2
    instead: str | None = None
    open_suggestions: dict[str, OpenSuggestion] = attrs.Factory(dict)
    asked: dict[str, Ask] = attrs.Factory(dict)
    open_asks: dict[str, Ask] = attrs.Factory(dict)
    facts: dict[str, Any] = attrs.Factory(dict)

    @classmethod
    def fold(cls, events: Iterable[Event]) -> ConversationState:
        """The state a conversation is in after these events."""
        state = cls()
        for event in events:
            state.apply(event)
        return state

    @property
    def ended(self) -> bool:
        """Whether the conversation has ended (later words are logged, never sent)."""
        return LIFE.is_final(self.life)

    def owes(self) -> bool:
        """Whether anything is owed to the agent."""
        return bool(self.owed_outcomes or self.owed_refusals or self.owed_words)

    def pending(self) -> tuple[Suggestion | Ask, ...]:
        """The suggestions and asks waiting for a decision or an answer that was deferred."""
        deferred = [each.suggestion() for each in self.open_suggestions.values() if each.deferred]
        return (*deferred, *self.open_asks.values())

    def awaits_person(self) -> bool:
        """Whether a deferred decision or answer is pending (:meth:`pending` without making the records)."""
        return bool(self.open_asks) or any(each.deferred for each in self.open_suggestions.values())

    def handled_flags(self) -> dict[str, bool]:
        """What the turn loop decides on once a reply is handled: everything owed now came from that reply."""
        return {
            "ending": self.ended,
            "words_pending": bool(self.owed_words),
            "needs_reply": any(outcome.status in NEEDS_REPLY for outcome in self.owed_outcomes),
            "unusable_reply": bool(self.owed_refusals),
        }

    def apply(self, event: Event) -> None:
        """Advance the state by one event; an event the machines refuse raises and changes nothing."""
        handler = _APPLY.get(event.type)
        if handler is not None:
            handler(self, event)
        element = getattr(event, "element", None)
        if element is not None and element > self.cursor:
            self.cursor = element

    def _began(self) -> None:
        self.life = LIFE.fire(self.life, "begin")

    def _said(self, event: Any) -> None:
        self._began()
        if not self.ended:
            self.loop = TURN_LOOP.initial
            self.turn = 0

    def _resumed(self, event: ResumedEvent) -> None:
        self._began()
        self.loop = TURN_LOOP.fire(self.loop, "resume")

    def _finished(self, event: FinishedEvent) -> None:
        if event.status == "awaiting":
            self.loop = TURN_LOOP.fire(self.loop, "park")
        self.life = LIFE.fire(self.life, "finish")

    def _ended(self, event: EndedEvent) -> None:
        self.life = LIFE.fire(self.life, "end")

    def _sent(self, event: SentEvent) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "start_turn")
        self.turn = event.turn

    def _turn_limit(self, event: TurnLimitEvent) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "start_turn", out_of_turns=True)

    def _reply(self, event: ReplyEvent) -> None:
        if self.loop == "awaiting_reply":
            self._reply_started(event)
        self.reply = event.text

    def _reply_started(self, event: ReplyEvent | ReplyStartedEvent) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "reply")
        self.replies += 1
        self.reply = ""
        self.cursor = -2
        self.instead = None
        self.asked.clear()
        self.owed_outcomes.clear()
        self.owed_refusals.clear()
        self.owed_words.clear()

    def _no_reply(self, event: Any) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "time_out")

    def _send_failed(self, event: Any) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "send_fail")

    def _interrupted(self, event: InterruptedEvent) -> None:
        if not TURN_LOOP.is_final(self.loop):
            self.loop = TURN_LOOP.fire(self.loop, "cancel")

    def _handled(self, event: Any) -> None:
        self.loop = TURN_LOOP.fire(self.loop, "handled", **self.handled_flags())

    def _outcome(self, event: OutcomeEvent) -> None:
        self.open_suggestions.pop(event.id, None)
        self.owed_outcomes.append(event.outcome)

    def _refused_reply(self, event: ReplyRefusedEvent) -> None:
        self.owed_refusals.append(event)

    def _ask(self, event: AskEvent) -> None:
        self.asks += 1
        if event.asked:
            self.asked[event.id] = Ask(
                id=event.id,
                text=event.text,
                response_type=event.response_type,
                options=event.options,
                timeout=event.timeout,
            )

    def _answered(self, event: AnsweredEvent) -> None:
        self.asked.pop(event.ask_id, None)
        self.open_asks.pop(event.ask_id, None)
        if event.text:
            self.owed_words.append(event.text)

    def _deferred(self, event: DeferredEvent) -> None:
        if event.subject_id in self.open_suggestions:
            self.open_suggestions[event.subject_id].deferred = True
        else:
            self.open_asks[event.subject_id] = self.asked.pop(event.subject_id)

    def _proposed(self, event: ProposedEvent) -> None:
        self.suggestions_numbered += event.numbered
        self.open_suggestions[event.id] = OpenSuggestion(
            id=event.id, action=event.action, text=event.text, payload=event.payload
        )

    def _suggestion(self, event: SuggestionEvent) -> None:
        opened = self.open_suggestions[event.id]
        opened.payload = event.payload
        opened.preview = event.preview
        opened.destructive = event.destructive
        opened.mutates = event.mutates
        opened.handoff = event.handoff
        if event.mutates and not event.handoff:
            opened.state = SUGGESTION.fire(opened.state, "present")

    def _decided(self, event: DecidedEvent) -> None:
        opened = self.open_suggestions.get(event.suggestion_id)
        if opened is not None:
            opened.deferred = False
            if event.decision == "edit":
                opened.payload = event.payload
                opened.edited = True
        if event.decision == "say" and event.text:
            self.instead = event.text
            self.owed_words.append(event.text)

    def _refused(self, event: RefusedEvent) -> None:
        opened = self.open_suggestions[event.suggestion_id]
        opened.state = SUGGESTION.fire(opened.state, "refuse")
        opened.issue = Issue(code=event.code, field=event.field, hint=event.hint)

    def _action_started(self, event: ActionStartedEvent) -> None:
        opened = self.open_suggestions[event.suggestion_id]
        if opened.state in DECIDING:
            opened.state = SUGGESTION.fire(opened.state, "accept")
        else:
            opened.state = SUGGESTION.fire(opened.state, "hand_off" if opened.handoff else "run_read_only")
        opened.payload = event.payload
        opened.preview = event.preview

    def _declare(self, event: DeclareEvent) -> None:
        if not event.context_key.startswith(OUTCOME_KEY_PREFIX):
            self.facts[event.context_key] = event.value


_APPLY: dict[str, Callable[[ConversationState, Any], None]] = {
    "said": ConversationState._said,
    "resumed": ConversationState._resumed,
    "finished": ConversationState._finished,
    "ended": ConversationState._ended,
    "sent": ConversationState._sent,
    "turn-limit": ConversationState._turn_limit,
    "reply": ConversationState._reply,
    "reply-started": ConversationState._reply_started,
    "no-reply": ConversationState._no_reply,
    "send-failed": ConversationState._send_failed,
    "interrupted": ConversationState._interrupted,
    "handled": ConversationState._handled,
    "outcome": ConversationState._outcome,
    "reply-refused": ConversationState._refused_reply,
    "ask": ConversationState._ask,
    "answered": ConversationState._answered,
    "deferred": ConversationState._deferred,
    "proposed": ConversationState._proposed,
    "suggestion": ConversationState._suggestion,
    "decided": ConversationState._decided,
    "refused": ConversationState._refused,
    "action-started": ConversationState._action_started,
    "declare": ConversationState._declare,
}
