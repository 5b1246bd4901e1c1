"""A plain-text surface: the conversation as a person would like to read it afterwards.

It shows what was said, what the agent proposed (the preview, destructive ones marked), what the person decided,
what ran, and what the agent was told. It holds no rules: it renders the conversation's projection and the
person's decisions.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from ..ports import AnswerLike, DecisionLike, HumanPort
from ..runtime.events import Event, InformDeltaEvent, LogEntry
from ..runtime.records import Accept, Ask, Dismiss, Edit, Say, Suggestion, TurnResult, as_decision
from ..views.person import (
    AgentText,
    Aside,
    Card,
    Item,
    Notice,
    PersonWords,
    Projection,
    Question,
    RefusedProposal,
    Told,
    holding_words,
)

_MARKS = {
    "done": "✓ done",
    "failed": "✗ failed",
    "invalid": "✗ invalid",
    "dismissed": "– dismissed",
    "superseded": "– superseded",
    "handed-off": "→ handed off",
}


def done_before_words(card: Card) -> str | None:
    """How a card that repeats a suggestion done already is marked (``already done at 10:02 as sg-1``, local
    time), or ``None`` when it repeats none."""
    if card.done_before is None:
        return None
    at = "" if card.done_at is None else f" at {time.strftime('%H:%M', time.localtime(card.done_at))}"
    return f"already done{at} as {card.done_before}"


def approvals_words(card: Card) -> str | None:
    """Where a card's approval policy stands (``1 of 2 approvals: ada, reminded``), or ``None`` without one."""
    if not card.approvals_needed:
        return None
    who = f": {', '.join(card.approvers)}" if card.approvers else ""
    words = f"{len(card.approvers)} of {card.approvals_needed} approvals{who}"
    if card.escalated_to:
        return f"{words}, escalated to {', '.join(card.escalated_to)}"
    return f"{words}, reminded" if card.reminded else words


def elsewhere_words(was: Card | None, card: Card) -> str | None:
    """What changed on ``card`` since ``was`` (the same card as a surface last showed it), when someone else
    changed it (another surface or process deciding, approving, claiming, or a deadline firing): an approval
    (``sg-1: 1 of 2 approvals: rex``), a claim or an assignment (``sg-1: claimed by rex until 10:15``), a
    reminder or an escalation, or its end (``sg-1 was decided elsewhere by rex via web``;
    the outcome itself is the card's own line). ``None`` when nothing a person follows changed."""
    if card.outcome and (was is None or not was.outcome):
        last = card.decisions[-1] if card.decisions else None
        expired = card.reported is not None and card.reported.expired
        if expired or (last is not None and last.decision == "expire"):
            return f"{card.id} expired: nobody decided in time"
        if last is None:
            return None
        by = f" by {last.by}" if last.by else ""
        via = f" via {last.via}" if last.via else ""
        return f"{card.id} was decided elsewhere{by}{via}: {last.decision}"
    if was is None or card.outcome:
        return None
    held = (card.claimed_by, card.claimed_until, card.assigned_to, card.assigned_role)
    if held != (was.claimed_by, was.claimed_until, was.assigned_to, was.assigned_role):
        return f"{card.id}: {holding_words(card, time.time()) or 'nobody has claimed it'}"
    if card.approvers != was.approvers or card.escalated_to != was.escalated_to or card.reminded != was.reminded:
        approvals = approvals_words(card)
        if approvals is not None:
            return f"{card.id}: {approvals}"
        if card.escalated_to != was.escalated_to:
            return f"{card.id}: escalated to {', '.join(card.escalated_to)}"
        return f"{card.id}: its deciders were reminded" if card.reminded else None
    return None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class Transcript:
    """Writes one line per step through ``write``; :meth:`show` is an ``on_event`` callback.

    It renders the conversation's :class:`~dial_runtime.views.person.Projection`: what each event adds or
    changes. A suggestion the runtime refused before showing it (an unknown action, a payload the domain refused)
    was never the person's to decide: it is a one-line note that the agent's proposal was refused and why, never a
    proposal or an outcome of one. ``shown`` holds the ids of the suggestions shown (add those of an earlier
    session when showing its outcomes).
    """

    def __init__(self, write: Callable[[str], object]) -> None:
        self.write = write
        self.projection = Projection()
        self._proposed: set[str] = set()

    @property
    def shown(self) -> set[str]:
        """The ids of the suggestions shown to the person, in this session or (added) an earlier one."""
        return self.projection.shown

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

    def show(self, event: Event | InformDeltaEvent | LogEntry) -> None:
        """Render what one event (the ``on_event`` callback) or log entry adds to the projection; text still
        arriving (``inform-delta``) waits for its complete ``inform``."""
        for item in self.projection.feed(event):
            self.render(item)

    def render(self, item: Item) -> None:
        """Write the lines of one item of the projection as it is now (a card: its proposal the first time, its
        outcome once it ended)."""
        match item:
            case AgentText(text=text, unconfirmed=str() as why):
                self.write(f"agent (not confirmed by the runtime: {why}): {text}")
            case AgentText(text=text):
                self.write(f"agent: {text}")
            case Question():
                self.write(f"agent asks: {item.text}")
                for number, option in enumerate(item.options, 1):
                    default = " (default)" if option.default else ""
                    self.write(f"   {number}. {option.label or option.value}{default}")
            case Card():
                self._card(item)
            case RefusedProposal():
                self._refused_proposal(item)
            case PersonWords(how="said"):
                self.person(item.text)
            case PersonWords(how="answer"):
                self.write(f"   you answer: {item.text}")
            case PersonWords():
                self.write(f"   you decide on {item.subject_id}: say instead: {item.text}")
            case Notice(text=text) | Aside(text=text) if text:
                self.write(f"   ({text})")
            case Told(turn=turn, reports=reports) if reports:
                self.write(f"   (turn {turn}: the agent is told {', '.join(reports)})")

    def _card(self, card: Card) -> None:
        """A card newly shown is a proposal; one that ended, its outcome (what changes between is the person's
        to say, through :class:`NarratedHuman`)."""
        if card.id not in self._proposed and not card.outcome:
            self._proposed.add(card.id)
            marks = ["hand-off"] if card.handoff else [] if card.mutates else ["read-only, runs at once"]
            if card.destructive:
                marks.insert(0, "DESTRUCTIVE")
            repeated = done_before_words(card)
            if repeated is not None:
                marks.append(repeated)
            approvals = approvals_words(card)
            if approvals is not None:
                marks.append(approvals)
            suffix = f"  [{', '.join(marks)}]" if marks else ""
            self.write(f"agent proposes {card.id}: {card.preview}{suffix}")
            if card.text:
                self.write(f"   in the agent's words: {card.text}")
            return
        reported = card.reported
        if reported is None:
            return
        details = [] if card.result is None else [card.result]
        details.extend(text for text in (reported.error, reported.hint) if text)
        if reported.edited:
            details.append("edited")
        if reported.expired:
            details.append("expired")
        if reported.reconciled:
            details.append("told by the domain after a restart")
        subject = card.preview or card.action
        self.write(f"   {_MARKS[card.status]}: {subject}" + (f" ({'; '.join(details)})" if details else ""))

    def _refused_proposal(self, proposal: RefusedProposal) -> None:
        if not proposal.refused:
            self.write(f"   {_MARKS[proposal.status]}: {proposal.preview or proposal.action}")
            return
        reasons = "; ".join(text for text in (proposal.error, proposal.hint) if text)
        reason = reasons or proposal.code or "no reason given"
        self.write(f"   (the agent's proposal {proposal.action} was refused and not shown to you: {reason})")


class NarratedHuman:
    """Wraps a person so their decisions and answers appear in the transcript."""

    def __init__(self, human: HumanPort, transcript: Transcript) -> None:
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
