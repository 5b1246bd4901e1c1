"""An audit of one conversation: for every proposal, what the agent proposed, what the person was shown, who
decided, through which surface and when, what ran under which key, what came of it, and whether the domain
reconciled it after a crash; with the verdict of the log's hash chain, so a report of a log someone edited says so.

The report reads the log's projection (:mod:`dial_runtime.views.person`), as every surface does: a card for
each suggestion the person was shown, a refused proposal for each one they never saw. It is plain data
(:class:`AuditReport`, msgspec), written as JSON by ``dial-runtime audit --json`` or as text by :func:`audit_text`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Any

import msgspec

from ..errors import LogError
from ..runtime.events import LogEntry
from ..runtime.records import payload_digest
from ..runtime.state import fold_log
from ..stores.chain import ChainCheck
from ..views.person import Card, CardDecision, RefusedProposal, project

__all__ = ["AuditReport", "ProposalAudit", "audit", "audit_text"]


class ProposalAudit(msgspec.Struct, frozen=True, kw_only=True):
    """One proposal's story.

    ``proposed``: the payload the agent proposed (``text``: its words for it); ``shown``: whether the person saw
    it (``False``: the runtime refused it, or the person's words overtook it), with its ``preview``, the digest of
    the payload shown (``shown_digest``, what ``decide(shown=)`` compares) and when (``shown_at``);
    ``decisions``: every decision on it, in order; ``ran``: the payload that ran (``None``: nothing ran), its
    digest, its idempotency ``key`` and its start; then how it ended (``status``, ``result``, ``error``, ``code``,
    ``reconciled``, ``ended_at``; ``status`` is ``running`` or ``pending`` while it has no outcome).
    """

    id: str
    action: str
    proposed: Any = None
    text: str = ""
    shown: bool = True
    preview: str = ""
    shown_digest: str | None = None
    shown_at: float | None = None
    decisions: tuple[CardDecision, ...] = ()
    ran: Any = None
    ran_digest: str | None = None
    key: str | None = None
    started_at: float | None = None
    status: str = "pending"
    result: Any = None
    error: str | None = None
    code: str | None = None
    reconciled: bool = False
    ended_at: float | None = None


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's audit: its ``proposals`` in the order they were made, its entry count, the log's hash
    chain as verified (``None``: not checked), and why the log does not fold, when it does not (``fold_error``:
    an entry claims what no run of the runtime could do, such as a run nobody accepted)."""

    conversation_id: str
    entries: int
    proposals: tuple[ProposalAudit, ...]
    chain: ChainCheck | None = None
    fold_error: str | None = None

    @property
    def trustworthy(self) -> bool:
        """Whether the log matches its chain (when checked) and folds: what the report says is what happened."""
        return (self.chain is None or self.chain.ok) and self.fold_error is None


def audit(entries: Iterable[LogEntry], *, conversation_id: str, chain: ChainCheck | None = None) -> AuditReport:
    """The audit of a conversation's log (``chain``: its hash chain, verified by the caller from the rows as
    stored, see :func:`~dial_runtime.stores.chain.verify_log`)."""
    log = list(entries)
    try:
        fold_log(log)
        fold_error = None
    except LogError as error:
        fold_error = str(error)
    proposals = []
    for item in project(log).items:
        if isinstance(item, Card):
            proposals.append(_card(item))
        elif isinstance(item, RefusedProposal):
            proposals.append(_refused(item))
    return AuditReport(
        conversation_id=conversation_id,
        entries=len(log),
        proposals=tuple(proposals),
        chain=chain,
        fold_error=fold_error,
    )


def _card(card: Card) -> ProposalAudit:
    reported = card.reported
    ran = card.started_at is not None
    return ProposalAudit(
        id=card.id,
        action=card.action,
        proposed=card.proposed,
        text=card.text,
        preview=card.preview,
        shown_digest=payload_digest(card.action, card.proposed),
        shown_at=card.time,
        decisions=card.decisions,
        ran=card.payload if ran else None,
        ran_digest=payload_digest(card.action, card.payload) if ran else None,
        key=card.run_key,
        started_at=card.started_at,
        status=card.status,
        result=None if reported is None else reported.result,
        error=None if reported is None else reported.error,
        code=None if reported is None else reported.code,
        reconciled=reported is not None and reported.reconciled,
        ended_at=card.ended_at,
    )


def _refused(proposal: RefusedProposal) -> ProposalAudit:
    return ProposalAudit(
        id=proposal.id,
        action=proposal.action,
        proposed=proposal.payload,
        shown=False,
        preview=proposal.preview,
        status=proposal.status,
        error=proposal.error or proposal.hint,
        code=proposal.code,
        shown_at=proposal.time,
    )


def audit_text(report: AuditReport) -> str:
    """The report for a person to read: the chain's verdict first, then each proposal, a few lines each."""
    lines = [f"conversation {report.conversation_id}: {report.entries} entries, {len(report.proposals)} proposals"]
    if report.chain is not None:
        lines.append(f"chain: {report.chain.summary()}")
    if report.fold_error is not None:
        lines.append(f"the log does not fold: {report.fold_error}")
    if not report.trustworthy:
        lines.append("WARNING: this log does not match its record; what follows is what it now claims")
    for proposal in report.proposals:
        lines.append("")
        lines.extend(_proposal_lines(proposal))
    return "\n".join(lines)


def _proposal_lines(proposal: ProposalAudit) -> list[str]:
    lines = [
        f"{proposal.id} {proposal.action}: {proposal.status}" + (" (reconciled)" if proposal.reconciled else "")
    ]
    lines.append(f"  proposed {_json(proposal.proposed)}" + (f": {proposal.text}" if proposal.text else ""))
    if not proposal.shown:
        reason = "; ".join(part for part in (proposal.code, proposal.error) if part)
        lines.append("  never shown" + (f" ({reason})" if reason else ""))
        return lines
    lines.append(f"  shown {_when(proposal.shown_at)} as {proposal.preview!r} [{proposal.shown_digest}]")
    for decision in proposal.decisions:
        who = f" by {decision.by}" if decision.by else ""
        via = f" via {decision.via}" if decision.via else ""
        edited = f" to {_json(decision.payload)}" if decision.decision == "edit" else ""
        said = f": {decision.text!r}" if decision.text else ""
        lines.append(f"  {decision.decision}{edited}{said}{who}{via} {_when(decision.time)}")
    if proposal.ran_digest is not None:
        lines.append(
            f"  ran {_json(proposal.ran)} {_when(proposal.started_at)} [{proposal.ran_digest}] key {proposal.key}"
        )
    if proposal.ended_at is not None:
        told = _json(proposal.result) if proposal.result is not None else ""
        why = "; ".join(part for part in (proposal.code, proposal.error) if part)
        lines.append(
            f"  ended {proposal.status} {_when(proposal.ended_at)} {told}{f' ({why})' if why else ''}".rstrip()
        )
    return lines


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _when(time: float | None) -> str:
    if time is None:
        return "at an unknown time"
    return "at " + datetime.datetime.fromtimestamp(time, tz=datetime.timezone.utc).isoformat(timespec="seconds")
