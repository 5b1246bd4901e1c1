"""Scoring recorded conversations: where they come from (JSON Lines files; a store's are read by the command
line), and :func:`evaluate`, which scores candidates on them and sums the scores up in an
:class:`~.report.EvalReport`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LogError
from ..runtime.events import LogEntry
from ..runtime.state import fold_log
from ..stores.jsonl import import_jsonl
from .counterfactual import Candidate, evaluate_conversation
from .report import EvalReport

__all__ = ["evaluate", "read_jsonl_logs"]


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
