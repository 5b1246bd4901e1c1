"""Where a person was asked to decide: each suggestion of a log that waited for a person's decision, with what a
rule for whether to ask would have been given then (the action, the payload proposed, whose words asked for it,
the conversation's facts as they stood) and how it ended (:class:`DecisionPoint`).

Rules are tried against these points before they ship (:mod:`dial_runtime.decisions.rules`); nothing is run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..runtime.asking import DecisionPoint, PersonDecided
from ..runtime.events import LogEntry, SuggestionEvent
from ..runtime.state import ConversationState, fold_log
from .person import project

__all__ = ["DecisionPoint", "PersonDecided", "decision_points"]

_DECIDED: dict[str | None, PersonDecided] = {
    "accept": "accepted",
    "edit": "edited",
    "dismiss": "dismissed",
    "expire": "expired",
    "say": "set-aside",
}


def decision_points(conversation_id: str, entries: Iterable[LogEntry]) -> list[DecisionPoint]:
    """Every suggestion of the log ``entries`` that waited for a person's decision (one that ran at once, read-only
    or a hand-off, is none), in the order shown. The log is folded as it is read (a log no run could have written
    raises :class:`~dial_runtime.errors.LogError`)."""
    logged = list(entries)
    state = ConversationState()
    asked: list[tuple[SuggestionEvent, str | None, dict[str, Any]]] = []
    for seq, entry in enumerate(logged, start=1):
        fold_log([entry], state, first_seq=seq)
        event = entry.event
        if isinstance(event, SuggestionEvent) and event.mutates and not event.handoff:
            asked.append((event, state.speaker, dict(state.facts)))
    projection = project(logged)
    points = []
    for event, principal, facts in asked:
        card = projection.card(event.id)
        decided: PersonDecided = "other"
        decided_by = None
        if card is not None and card.waiting:
            decided = "waiting"
        elif card is not None and card.ruled_words:  # no person was asked
            decided = "ruled"
        elif card is not None and card.decisions:
            last = card.decisions[-1]
            decided, decided_by = _DECIDED.get(last.decision, "other"), last.by
        elif card is not None and card.status == "superseded":  # words said over it, no decision on it
            decided = "set-aside"
        points.append(
            DecisionPoint(
                conversation=conversation_id,
                id=event.id,
                action=event.action,
                payload=event.payload,
                preview=event.preview,
                principal=principal,
                facts=facts,
                decided=decided,
                decided_by=decided_by,
            )
        )
    return points
