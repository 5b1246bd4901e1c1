"""A plain-text surface: the conversation as a person would like to read it afterwards.

It shows what was said, what the agent proposed (the preview, destructive ones marked), what the person decided,
what ran, and what the agent was told. It holds no rules: it only renders events and decisions.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from .language.parser import parse
from .ports import AnswerLike, DecisionLike, Human
from .runtime.events import Event, InformDeltaEvent
from .runtime.records import Accept, Ask, Dismiss, Edit, Say, Suggestion, TurnResult, as_decision

_MARKS = {
    "done": "✓ done",
    "failed": "✗ failed",
    "invalid": "✗ invalid",
    "dismissed": "– dismissed",
    "superseded": "– superseded",
    "handed-off": "→ handed off",
}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class Transcript:
    """Writes one line per step through ``write``; :meth:`show` is an ``on_event`` callback.

    A suggestion the runtime refused before showing it (an unknown action, a payload the domain refused) was
    never the person's to decide: its ``invalid`` outcome is a one-line note that the agent's proposal was refused
    and why, never a proposal or an outcome of one. ``shown`` holds the ids of the suggestions shown (add those of
    an earlier session when showing its outcomes).
    """

    def __init__(self, write: Callable[[str], object]) -> None:
        self.write = write
        self.shown: set[str] = set()

    def person(self, words: str) -> None:
        self.write(f"\nyou: {words}")

    def result(self, result: TurnResult) -> None:
        self.write(f"   [{result.status} after {result.turns} turn(s), {len(result.outcomes)} outcome(s)]")

    def decided(self, suggestion: Suggestion, decision: object) -> None:
        """Show a decision the person made on ``suggestion``."""
        match as_decision(decision):
            case Accept():
                said = "accept"
            case Dismiss():
                said = "dismiss"
            case Edit(payload=payload):
                said = f"edit → {_json(payload)}"
            case Say(text=text):
                said = f"say instead: {text}"
        self.write(f"   you decide on {suggestion.id}: {said}")

    def refused(self, suggestion: Suggestion) -> None:
        """Show why the domain refused the payload the person is now looking at."""
        issue = suggestion.issue
        reason = (issue.hint or issue.code or "no reason given") if issue else "no reason given"
        self.write(f"   the edit was refused: {reason}")

    def answered(self, ask: Ask, answer: object) -> None:
        self.write(f"   you answer: {answer}" if answer else "   you leave the question open")

    def show(self, event: Event | InformDeltaEvent) -> None:
        """Render one event (the ``on_event`` callback); text still arriving (``inform-delta``) waits for its
        complete ``inform``."""
        line = getattr(self, "_" + event.type.replace("-", "_"), None)
        if line is not None:
            line(event)

    def _sent(self, event: Any) -> None:
        envelope = parse(event.message)
        reports = [token for element in (envelope.elements if envelope else ()) for token in element.yields]
        if reports:
            self.write(f"   (turn {event.turn}: the agent is told {', '.join(reports)})")

    def _inform(self, event: Any) -> None:
        self.write(f"agent: {event.text}")

    def _ask(self, event: Any) -> None:
        self.write(f"agent asks: {event.text}")
        for number, option in enumerate(event.options, 1):
            self.write(f"   {number}. {option.label or option.value}{' (default)' if option.default else ''}")

    def _suggestion(self, event: Any) -> None:
        self.shown.add(event.id)
        marks = ["hand-off"] if event.handoff else [] if event.mutates else ["read-only, runs at once"]
        if event.destructive:
            marks.insert(0, "DESTRUCTIVE")
        suffix = f"  [{', '.join(marks)}]" if marks else ""
        self.write(f"agent proposes {event.id}: {event.preview}{suffix}")
        if event.text:
            self.write(f"   in the agent's words: {event.text}")

    def _outcome(self, event: Any) -> None:
        if event.status == "invalid" and event.id not in self.shown:
            reasons = "; ".join(text for text in (event.error, event.hint) if text)
            reason = reasons or event.code or "no reason given"
            self.write(f"   (the agent's proposal {event.action} was refused and not shown to you: {reason})")
            return
        details = []
        if event.result is not None:
            details.append(_json(event.result))
        details.extend(text for text in (event.error, event.hint) if text)
        if event.edited:
            details.append("edited")
        if event.expired:
            details.append("expired")
        subject = event.preview or event.action
        self.write(f"   {_MARKS[event.status]}: {subject}" + (f" ({'; '.join(details)})" if details else ""))

    def _no_reply(self, event: Any) -> None:
        self.write(f"   (no reply: {event.error})")

    def _turn_limit(self, event: Any) -> None:
        self.write(f"   (stopped after {event.turns} turns)")

    def _declare(self, event: Any) -> None:
        self.write(f"   (the agent notes {event.context_key} = {_json(event.value)})")

    def _phatic(self, event: Any) -> None:
        if event.signal == "session-complete":
            self.write("   (the agent ends the conversation)")

    def _delegate(self, event: Any) -> None:
        self.write(f"   (the agent hands over to {event.to}: {event.text or event.intent or ''})")

    def _execute(self, event: Any) -> None:
        self.write(f"   (the agent sent {len(event.steps)} step(s) to execute; not run here)")


class NarratedHuman:
    """Wraps a person so their decisions and answers appear in the transcript."""

    def __init__(self, human: Human, transcript: Transcript) -> None:
        self.human = human
        self.transcript = transcript

    async def decide(self, suggestion: Suggestion) -> DecisionLike:
        if suggestion.issue is not None:
            self.transcript.refused(suggestion)
        decision = self.human.decide(suggestion)
        if inspect.isawaitable(decision):
            decision = await decision
        self.transcript.decided(suggestion, decision)
        return decision

    async def answer(self, ask: Ask) -> AnswerLike:
        answer = self.human.answer(ask)
        if inspect.isawaitable(answer):
            answer = await answer
        self.transcript.answered(ask, answer)
        return answer
