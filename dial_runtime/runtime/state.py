"""A conversation's state as a fold over its event log: no I/O, no awaiting, no callbacks.

What the agent is owed (outcomes, refusals of unusable replies, words the person gave inside the conversation)
accumulates from the events that produce it and is cleared by the next ``reply`` event, because a reply means the
message carrying it arrived. So a send that fails, a deadline that passes or a cancelled turn leaves it owed
without any event having to say so, and a conversation rebuilt from its log owes exactly what the original did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..language.outcomes import Outcome
from ..statemachines import LIFE
from .events import (
    AnsweredEvent,
    AskEvent,
    DecidedEvent,
    DeclareEvent,
    EndedEvent,
    Event,
    FinishedEvent,
    OutcomeEvent,
    ProposedEvent,
    ReplyEvent,
    ReplyRefusedEvent,
    SaidEvent,
)

#: Declared keys the runtime itself uses to report outcomes; they never enter ``facts``.
OUTCOME_KEY_PREFIX = "outcome:"


@attrs.define
class ConversationState:
    """Everything a conversation remembers between turns, kept current by :meth:`apply`."""

    life: str = LIFE.initial
    owed_outcomes: list[Outcome] = attrs.Factory(list)
    owed_refusals: list[ReplyRefusedEvent] = attrs.Factory(list)
    owed_words: list[str] = attrs.Factory(list)
    suggestions_numbered: int = 0
    asks: int = 0
    replies: int = 0
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

    def apply(self, event: Event) -> None:
        """Advance the state by one event."""
        handler = _APPLY.get(event.type)
        if handler is not None:
            handler(self, event)

    def _said(self, event: SaidEvent) -> None:
        self.life = LIFE.fire(self.life, "begin")

    def _finished(self, event: FinishedEvent) -> None:
        self.life = LIFE.fire(self.life, "finish")

    def _ended(self, event: EndedEvent) -> None:
        self.life = LIFE.fire(self.life, "end")

    def _reply(self, event: ReplyEvent) -> None:
        self.replies += 1
        self.owed_outcomes.clear()
        self.owed_refusals.clear()
        self.owed_words.clear()

    def _outcome(self, event: OutcomeEvent) -> None:
        self.owed_outcomes.append(event.outcome)

    def _refused(self, event: ReplyRefusedEvent) -> None:
        self.owed_refusals.append(event)

    def _answered(self, event: AnsweredEvent) -> None:
        if event.text:
            self.owed_words.append(event.text)

    def _decided(self, event: DecidedEvent) -> None:
        if event.decision == "say" and event.text:
            self.owed_words.append(event.text)

    def _proposed(self, event: ProposedEvent) -> None:
        self.suggestions_numbered += event.numbered

    def _ask(self, event: AskEvent) -> None:
        self.asks += 1

    def _declare(self, event: DeclareEvent) -> None:
        if not event.context_key.startswith(OUTCOME_KEY_PREFIX):
            self.facts[event.context_key] = event.value


_APPLY: dict[str, Callable[[ConversationState, Any], None]] = {
    "said": ConversationState._said,
    "finished": ConversationState._finished,
    "ended": ConversationState._ended,
    "reply": ConversationState._reply,
    "outcome": ConversationState._outcome,
    "reply-refused": ConversationState._refused,
    "answered": ConversationState._answered,
    "decided": ConversationState._decided,
    "proposed": ConversationState._proposed,
    "ask": ConversationState._ask,
    "declare": ConversationState._declare,
}
