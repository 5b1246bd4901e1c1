"""Auditing a stored conversation: what each proposal became, who decided, what ran (:func:`audit`), and signed
heads of the stores' hash chain (:mod:`.signing`, the ``sign`` extra). The stores write the chain itself
(:mod:`dial_runtime.stores.chain`) on every append, so it lives with them."""

from __future__ import annotations

from .report import AuditReport, ProposalAudit, audit, audit_text

__all__ = ["AuditReport", "ProposalAudit", "audit", "audit_text"]
