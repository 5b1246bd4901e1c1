"""The audit of a conversation: every proposal's story (proposed, shown, decided by whom through which surface,
run under which key, its result, reconciled or not), read from the log's projection, as JSON and as text.

The stores' tampering cases (with the hash chain's verdict in the report) are in ``test_chain_audit``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from dial_runtime import Accept, Conversation, Dismiss, Edit, policy_human, scripted_human
from dial_runtime.audit import AuditReport, audit, audit_text
from dial_runtime.runtime.core import idempotency_key
from dial_runtime.runtime.events import LogEntry
from dial_runtime.runtime.records import payload_digest
from dial_runtime.stores import MemoryStore

from ..driver.test_reconcile import Mail, died_running
from ..fakes import Agent, Notes, envelope, suggest

ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")
PROPOSALS = envelope(
    suggest("add-note", '{"text": "milk"}', text="Shall I?"),
    suggest("add-note", '{"text": "eggs"}'),
    suggest("remove-note", '{"text": "tea"}'),
    suggest("fly", "{}"),
)


async def decided_conversation() -> tuple[Conversation, list[LogEntry]]:
    """sg-1 accepted in the web panel, sg-2 edited and accepted in the terminal, sg-3 dismissed by the program,
    sg-4 an unknown action, never shown."""
    store = MemoryStore()
    conversation = await Conversation.open(
        store, "c-1", agent=Agent([PROPOSALS, ACK]), domain=Notes(), human=scripted_human(["defer"] * 3)
    )
    await conversation.say("a few notes")
    await conversation.decide("sg-1", Accept(), by="ada", via="web")
    await conversation.decide("sg-2", Edit({"text": "brown eggs"}), by="bob", via="terminal")
    await conversation.decide("sg-3", Dismiss())
    return conversation, await store.read("c-1")


@pytest.mark.anyio
async def test_each_proposal_is_told_from_proposal_to_result() -> None:
    _, log = await decided_conversation()
    report = audit(log, conversation_id="c-1")
    assert report.trustworthy and report.chain is None and report.fold_error is None
    by_id = {proposal.id: proposal for proposal in report.proposals}
    assert list(by_id) == ["sg-1", "sg-2", "sg-3", "sg-4"]

    first = by_id["sg-1"]
    assert (first.action, first.proposed, first.text, first.shown) == (
        "add-note",
        {"text": "milk"},
        "Shall I?",
        True,
    )
    assert first.shown_digest == payload_digest("add-note", {"text": "milk"})
    assert [(d.decision, d.by, d.via) for d in first.decisions] == [("accept", "ada", "web")]
    assert (first.ran, first.key, first.status, first.result) == (
        {"text": "milk"},
        idempotency_key("c-1", log[0].time, "sg-1", 1),
        "done",
        {"count": 1},
    )
    assert first.started_at is not None and first.ended_at is not None and not first.reconciled

    edited = by_id["sg-2"]
    assert [(d.decision, d.by, d.via, d.payload) for d in edited.decisions] == [
        ("edit", "bob", "terminal", {"text": "brown eggs"})
    ]
    assert edited.proposed == {"text": "eggs"} and edited.ran == {"text": "brown eggs"}
    assert edited.ran_digest == payload_digest("add-note", {"text": "brown eggs"}) != edited.shown_digest

    dismissed = by_id["sg-3"]
    assert [(d.decision, d.by, d.via) for d in dismissed.decisions] == [("dismiss", None, None)]
    assert (dismissed.ran, dismissed.ran_digest, dismissed.key, dismissed.status) == (
        None,
        None,
        None,
        "dismissed",
    )

    unknown = by_id["sg-4"]
    assert (unknown.shown, unknown.status, unknown.code) == (False, "invalid", "unknown-action")


@pytest.mark.anyio
async def test_a_reconciled_run_says_so() -> None:
    conversation = Conversation(
        agent=Agent([]), domain=Mail({"sent": True}), human=policy_human(), log=died_running()
    )
    await conversation.recover()
    (proposal,) = audit(conversation.log, conversation_id="c-1").proposals
    assert (proposal.status, proposal.reconciled, proposal.result) == ("done", True, {"sent": True})
    assert "sg-1 send-email: done (reconciled)" in audit_text(audit(conversation.log, conversation_id="c-1"))


@pytest.mark.anyio
async def test_the_report_reads_as_text_and_round_trips_as_json() -> None:
    _, log = await decided_conversation()
    report = audit(log, conversation_id="c-1")
    text = audit_text(report)
    assert text.splitlines()[0] == f"conversation c-1: {len(log)} entries, 4 proposals"
    for line in [
        "sg-1 add-note: done",
        '  proposed {"text": "milk"}: Shall I?',
        "  accept by ada via web at ",
        '  edit to {"text": "brown eggs"} by bob via terminal at ',
        "  never shown (unknown-action",
    ]:
        assert line in text
    decoded = msgspec.json.decode(msgspec.json.encode(report), type=AuditReport)
    assert decoded == report


@pytest.mark.anyio
async def test_a_log_that_claims_what_no_run_could_do_is_reported_as_such() -> None:
    _, log = await decided_conversation()
    forged: list[Any] = [entry for entry in log if not (entry.event.type == "decided" and entry.seq < len(log))]
    renumbered = [msgspec.structs.replace(entry, seq=seq) for seq, entry in enumerate(forged, start=1)]
    report = audit(renumbered, conversation_id="c-1")
    assert report.fold_error is not None and not report.trustworthy
    assert "does not fold" in audit_text(report)
