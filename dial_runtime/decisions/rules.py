"""Rules for whether to ask a person at all, tried against what people really decided before they ship.

A rule is a plain Python function of a :class:`~dial_runtime.runtime.asking.DecisionPoint` (the action, the
payload proposed, whose words asked for it, the conversation's facts), named and versioned by a :class:`Rule`. It
answers ``"approve"``, :class:`Deny` (with the reason the agent is told), ``"ask"``, or ``None`` when it has no
opinion; :func:`first_verdict` applies a list of them as a domain declares them (``approval_rules``). These
records live in :mod:`dial_runtime.runtime.asking`, where the runtime applies them to live cards, and are exported
here too.

:func:`try_rules` runs a list of rules over recorded decision points (``dial-runtime eval rules``): what they would
have approved automatically that people dismissed, what they would have denied that people accepted, and what
raised. Nothing is run. :func:`load_rules` reads them from a Python file that declares ``RULES``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from ..runtime.asking import Deny, Rule, RuleVerdict, checked_rules, first_verdict
from ..views.points import DecisionPoint

__all__ = [
    "Deny",
    "Rule",
    "RuleVerdict",
    "RulesReport",
    "checked_rules",
    "first_verdict",
    "load_rules",
    "try_rules",
]


class TriedPoint(msgspec.Struct, frozen=True, kw_only=True):
    """A decision point and what the rules say of it."""

    point: DecisionPoint
    verdict: RuleVerdict


class RulesReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a list of rules would have done to the recorded decision points: each point tried (``tried``), and
    the points that would have gone another way than people decided."""

    tried: tuple[TriedPoint, ...]

    def _where(self, kind: str, *decided: str) -> list[TriedPoint]:
        return [each for each in self.tried if each.verdict.kind == kind and each.point.decided in decided]

    @property
    def approved(self) -> list[TriedPoint]:
        """What the rules would have approved without asking."""
        return [each for each in self.tried if each.verdict.kind == "approve"]

    @property
    def approved_yet_dismissed(self) -> list[TriedPoint]:
        """Approved by the rules, dismissed by people."""
        return self._where("approve", "dismissed")

    @property
    def approved_yet_edited(self) -> list[TriedPoint]:
        """Approved by the rules as proposed, run by people only after an edit."""
        return self._where("approve", "edited")

    @property
    def denied(self) -> list[TriedPoint]:
        """What the rules would have refused without asking."""
        return [each for each in self.tried if each.verdict.kind == "deny"]

    @property
    def denied_yet_accepted(self) -> list[TriedPoint]:
        """Denied by the rules, accepted (as proposed or edited) by people."""
        return self._where("deny", "accepted", "edited")

    @property
    def errors(self) -> list[TriedPoint]:
        """Where a rule's answer could not be used (it raised, or answered no verdict): asked."""
        return [each for each in self.tried if each.verdict.error is not None]

    def summary(self) -> dict[str, int]:
        """The counts: points tried, approved (and of them dismissed, edited), denied (and of them accepted),
        asked, errors."""
        return {
            "points": len(self.tried),
            "approved": len(self.approved),
            "approved_yet_dismissed": len(self.approved_yet_dismissed),
            "approved_yet_edited": len(self.approved_yet_edited),
            "denied": len(self.denied),
            "denied_yet_accepted": len(self.denied_yet_accepted),
            "asked": sum(each.verdict.kind == "ask" for each in self.tried),
            "errors": len(self.errors),
        }


def try_rules(rules: Sequence[Rule], points: Iterable[DecisionPoint]) -> RulesReport:
    """Each of ``points`` with what ``rules`` say of it (:func:`first_verdict`); nothing is run."""
    return RulesReport(
        tried=tuple(TriedPoint(point=point, verdict=first_verdict(rules, point)) for point in points)
    )


def load_rules(path: str) -> list[Rule]:
    """The rules a Python file declares as ``RULES`` (a list of :class:`Rule`, names and versions unique).
    ``ValueError`` in one line for a file that cannot be read or run (the line of a syntax error included), or
    that declares no such list."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(f"_dial_rules_{abs(hash(str(file.resolve())))}", file)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise ValueError(f"{path}:{error.lineno}: {error.msg}") from None
    except Exception as error:
        raise ValueError(f"{path}: running it raised {type(error).__name__}: {error}") from None
    finally:
        sys.modules.pop(spec.name, None)
    declared = getattr(module, "RULES", None)
    if not isinstance(declared, (list, tuple)):
        raise ValueError(f"{path}: declare RULES, a list of dial_runtime.decisions.rules.Rule")
    return list(checked_rules(declared, path))
