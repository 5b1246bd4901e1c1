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

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..errors import LogError
from ..jsonl import import_jsonl
from ..runtime.events import LogEntry
from ..runtime.state import fold_log
from .counterfactual import (
    LOWER_IS_BETTER,
    SCORES,
    Candidate,
    ConversationScore,
    Point,
    PointReply,
    Proposal,
    Verdict,
    evaluate_conversation,
    payload_distance,
    score,
)
from .report import Comparison, EvalReport, Summary, markdown, write_chart

if TYPE_CHECKING:
    from .persona import Persona, PersonaHuman, SelfPlayRun, self_play

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
    {"Persona": ".persona", "PersonaHuman": ".persona", "SelfPlayRun": ".persona", "self_play": ".persona"},
    globals(),
)


def read_jsonl_logs(paths: Iterable[str | Path]) -> dict[str, list[LogEntry]]:
    """The conversations in JSON Lines files as ``dial-runtime export`` writes them, by id; ``ValueError`` naming
    the file for one that cannot be read or holds a log no run could have written."""
    found: dict[str, list[LogEntry]] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as file:
                conversation, entries = import_jsonl(file)
            fold_log(entries)
        except OSError as error:
            raise ValueError(f"{path}: cannot read it ({error.strerror or error})") from None
        except (LogError, UnicodeDecodeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from None
        found[conversation] = entries
    return found


async def evaluate(
    conversations: Mapping[str, Sequence[LogEntry]],
    candidates: Mapping[str, Candidate],
    *,
    domain: Any = None,
    max_turns: int = 8,
) -> EvalReport:
    """Score each candidate at every point of each recorded conversation, against the recorded agent and what
    the person did (see :mod:`.counterfactual`); ``domain`` answers for its actions' specs, ``validate`` and
    ``preview`` (never ``run``) and gives URI candidates their system prompt."""
    scored = [
        await evaluate_conversation(conversation, entries, candidates, domain=domain, max_turns=max_turns)
        for conversation, entries in conversations.items()
    ]
    return EvalReport.of(scored, list(candidates))
