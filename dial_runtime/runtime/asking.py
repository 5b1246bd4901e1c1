"""Rules for whether to ask a person at all: what a rule is given (:class:`DecisionPoint`), what it answers
(``"approve"``, :class:`Deny`, ``"ask"`` or ``None``), and how a list of rules comes to one verdict
(:func:`first_verdict`).

A rule is a plain Python function, named and versioned by a :class:`Rule`. Rules are Python, not data in a
language of their own: a condition on a payload, a principal and a conversation's facts is already a Python
expression, which an application tests, types and reviews as the rest of its code, and a rule language would
grow into a second, weaker Python. Nothing here runs a rule on its own: a conversation's driver asks them when the
core asks (:class:`~dial_runtime.runtime.effects.ConsultRules`), and ``dial-runtime eval rules`` tries them
against recorded decisions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import msgspec

from .records import RuleVerdict

__all__ = ["DecisionPoint", "Deny", "PersonDecided", "Rule", "RuleVerdict", "checked_rules", "first_verdict"]

#: How a person's decision on a point ended it: ``accepted`` as proposed, ``edited`` (run with a payload of their
#: own), ``dismissed``, ``expired`` (nobody decided in time), ``set-aside`` (new words ended it), ``waiting``
#: (still), ``ruled`` (a rule approved or denied it: no person was asked), or ``other`` (it ended without a
#: person's decision: a crash, a refused payload, the end).
PersonDecided = Literal["accepted", "edited", "dismissed", "expired", "set-aside", "waiting", "ruled", "other"]


class DecisionPoint(msgspec.Struct, frozen=True, kw_only=True):
    """A suggestion that waited for a person's decision: its ``action`` and the ``payload`` proposed, whose words
    asked for it (``principal``, when the log says), the conversation's declared ``facts`` when it was shown, and
    how people decided it (``decided``, by ``decided_by``)."""

    conversation: str
    id: str
    action: str
    payload: Any
    preview: str = ""
    principal: str | None = None
    facts: dict[str, Any] = {}
    decided: PersonDecided = "other"
    decided_by: str | None = None


class Deny(msgspec.Struct, frozen=True):
    """A rule's answer that the action is refused without asking; ``reason`` is what the agent is told."""

    reason: str


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """A rule for whether to ask: ``decide(point)`` answers ``"approve"``, :class:`Deny`, ``"ask"`` or ``None``
    (no opinion: the next rule is asked). ``action`` is the action it is for (``None``: every action); ``name``
    and ``version`` name it wherever it decided, so a decision can be traced to the rule as it was then."""

    name: str
    version: str
    decide: Callable[[DecisionPoint], Any]
    action: str | None = None

    @property
    def label(self) -> str:
        """``name@version``, as a decision names the rule that took it."""
        return f"{self.name}@{self.version}"


def first_verdict(rules: Sequence[Rule], point: DecisionPoint) -> RuleVerdict:
    """The verdict of the first rule for ``point``'s action that has an opinion; ``ask`` when none has, or when
    that rule raises or answers something that is no verdict."""
    for rule in rules:
        if rule.action is not None and rule.action != point.action:
            continue
        try:
            said = rule.decide(point)
        except Exception as error:
            return RuleVerdict(kind="ask", rule=rule.label, error=f"it raised {type(error).__name__}: {error}")
        if said is None:
            continue
        if inspect.isawaitable(said):  # an async rule: its answer is never awaited, so it asks
            if inspect.iscoroutine(said):
                said.close()
            return RuleVerdict(kind="ask", rule=rule.label, error="it is async; a rule is a plain function")
        if said == "approve" or said == "ask":
            return RuleVerdict(kind=said, rule=rule.label)
        if isinstance(said, Deny) and isinstance(said.reason, str) and said.reason.strip():
            return RuleVerdict(kind="deny", rule=rule.label, reason=said.reason)
        return RuleVerdict(
            kind="ask",
            rule=rule.label,
            error=f"it answered {said!r:.60}, not 'approve', Deny(reason), 'ask' or None",
        )
    return RuleVerdict(kind="ask")


def checked_rules(rules: Iterable[object], where: str) -> tuple[Rule, ...]:
    """``rules`` as a tuple, once each is a :class:`Rule` whose ``decide`` is a function and no name and version
    is declared twice; ``ValueError`` in one line, naming ``where`` they were declared, otherwise."""
    checked: list[Rule] = []
    seen: set[str] = set()
    for rule in rules:
        if not isinstance(rule, Rule):
            raise ValueError(f"{where}: {rule!r:.60} is no rule; declare dial_runtime.decisions.rules.Rule")
        if not callable(rule.decide):
            raise ValueError(f"{where}: rule {rule.label}: decide is not a function")
        if rule.label in seen:
            raise ValueError(f"{where}: rule {rule.label} is declared twice")
        seen.add(rule.label)
        checked.append(rule)
    return tuple(checked)
