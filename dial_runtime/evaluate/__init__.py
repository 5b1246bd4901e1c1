"""Evaluation: score agents against what people actually decided, with nothing run.

- :func:`evaluate`: counterfactual replay of recorded conversations (:mod:`.counterfactual`): a candidate agent
  answers at every point where the recorded agent replied, and its replies are scored against the person's
  verdicts; :class:`~.report.EvalReport` sums it up (text, JSON, a chart).
- :mod:`.persona`: a simulated person (an LLM given a persona and a goal) and self-play into a store.
- :mod:`.tau2`: tau2-bench's airline domain, as an MCP domain, scored as tau2 does and by this runtime's own
  guarantees.

The persona and tau2 names are loaded on first use: importing this package does not import the MCP SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .counterfactual import (
        LOWER_IS_BETTER,
        SCORES,
        Candidate,
        ConversationScore,
        Point,
        PointReply,
        Proposal,
        Verdict,
        payload_distance,
        score,
    )
    from .persona import Persona, PersonaHuman, SelfPlayRun, self_play
    from .report import Comparison, EvalReport, Summary, markdown, write_chart
    from .scoring import evaluate, read_jsonl_logs

__all__ = [
    "LOWER_IS_BETTER",
    "SCORES",
    "Candidate",
    "Comparison",
    "ConversationScore",
    "EvalReport",
    "Persona",
    "PersonaHuman",
    "Point",
    "PointReply",
    "Proposal",
    "SelfPlayRun",
    "Summary",
    "Verdict",
    "evaluate",
    "markdown",
    "payload_distance",
    "read_jsonl_logs",
    "score",
    "self_play",
    "write_chart",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(
            (
                "LOWER_IS_BETTER",
                "SCORES",
                "Candidate",
                "ConversationScore",
                "Point",
                "PointReply",
                "Proposal",
                "Verdict",
                "payload_distance",
                "score",
            ),
            ".counterfactual",
        ),
        **dict.fromkeys(("Persona", "PersonaHuman", "SelfPlayRun", "self_play"), ".persona"),
        **dict.fromkeys(("Comparison", "EvalReport", "Summary", "markdown", "write_chart"), ".report"),
        **dict.fromkeys(("evaluate", "read_jsonl_logs"), ".scoring"),
    },
    globals(),
)
