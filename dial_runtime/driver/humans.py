"""Ready-made people for tests and unattended runs: a fixed policy, or a script of decisions and answers."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from ..runtime.records import Accept, Ask, Decision, Defer, Dismiss, Edit, Say, Suggestion, as_decision

#: The decisions a policy person makes: records that never change, so every such person shares them.
_POLICY_DECISIONS: dict[str, Decision] = {"accept": Accept(), "dismiss": Dismiss()}


class PolicyHuman:
    """Makes the same decision on every suggestion and gives the same answer to every ask."""

    def __init__(self, decision: str = "accept", *, answer_with: str = "") -> None:
        if decision not in _POLICY_DECISIONS:
            raise ValueError(f"policy_human: {decision!r} is not accept or dismiss")
        self._decision = _POLICY_DECISIONS[decision]
        self._answer = answer_with
        self.seen: list[Suggestion | Ask] = []

    def decide(self, suggestion: Suggestion) -> Decision:
        self.seen.append(suggestion)
        return self._decision

    def answer(self, ask: Ask) -> str:
        self.seen.append(ask)
        return self._answer


class ScriptedHuman:
    """Takes its decisions and answers, in order, from a script; a step is used up even when it is refused."""

    def __init__(self, steps: Iterable[Any]) -> None:
        self._steps = deque(steps)
        self.seen: list[Suggestion | Ask] = []

    def _next(self, purpose: str) -> Any:
        if not self._steps:
            raise LookupError(f"scripted_human: no scripted step left for this {purpose}")
        return self._steps.popleft()

    def decide(self, suggestion: Suggestion) -> Decision | Defer:
        self.seen.append(suggestion)
        step = self._next("decision")
        if step == "accept":
            return Accept()
        if step == "dismiss":
            return Dismiss()
        if step == "defer":
            return Defer()
        if isinstance(step, (Accept, Dismiss, Edit, Say, Defer)) or (
            isinstance(step, Mapping) and len(step) == 1 and ("edit" in step or "say" in step)
        ):
            return as_decision(step)
        raise TypeError(f"scripted_human: expected a decision, got {step!r}")

    def answer(self, ask: Ask) -> Any:
        self.seen.append(ask)
        step = self._next("ask")
        if step == "defer" or isinstance(step, Defer):
            return Defer()
        if isinstance(step, Mapping) and "answer" in step:
            return step["answer"]
        raise TypeError(f"scripted_human: expected {{'answer': ...}}, got {step!r}")


def policy_human(decision: str = "accept", *, answer_with: str = "") -> PolicyHuman:
    """A person who always accepts (or always dismisses) and answers every ask with ``answer_with``."""
    return PolicyHuman(decision, answer_with=answer_with)


def scripted_human(steps: Iterable[Any]) -> ScriptedHuman:
    """A person following a script: ``"accept"``, ``"dismiss"``, ``"defer"``, ``{"edit": p}``, ``{"say": t}``,
    ``{"answer": a}`` or decision records, used in order."""
    return ScriptedHuman(steps)
