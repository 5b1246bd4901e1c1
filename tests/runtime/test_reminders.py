"""Reminders and escalation: an action's ``remind_after`` and ``escalate_after`` are times on the log (when its
suggestion is shown); a suggestion still undecided then is ``reminded`` (once), and ``escalated`` to the deciders
holding ``escalate_to``, who may then approve it too. They fire as deadlines do: at the next call or by
``expire_due`` (the schedulers call it at ``Conversation.deadlines``), and a log with them replays the same."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from dial_runtime import Accept, ActionSpec, ApprovalPolicy, Conversation, project, replay, scripted_human
from dial_runtime.runtime.events import ApprovalRefusedEvent, EscalatedEvent, RemindedEvent, SuggestionEvent
from dial_runtime.stores import MemoryStore

from ..fakes import Agent, envelope, suggest
from .test_deadlines import Clock

DROP = envelope(suggest("drop-table", '{"table": "users"}'))
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")


class Ops:
    actions: ClassVar[dict[str, Any]] = {
        "drop-table": ActionSpec(
            mutates=True,
            destructive=True,
            policy=ApprovalPolicy(roles=frozenset({"dba"})),
            remind_after=60,
            escalate_after=300,
            escalate_to=frozenset({"cto"}),
            deadline=3600,
        )
    }

    def __init__(self) -> None:
        self.ran: list[Any] = []

    def run(self, action: str, payload: Any) -> Any:
        self.ran.append(payload)
        return None


async def waiting(clock: Clock) -> tuple[Conversation, Ops, float]:
    domain = Ops()
    conversation = await Conversation.open(
        MemoryStore(),
        "c-1",
        agent=Agent([DROP, ACK]),
        domain=domain,
        human=scripted_human(["defer"]),
        clock=clock,
    )
    await conversation.say("drop users", by="ada")
    shown = next(e for e in conversation.log if isinstance(e.event, SuggestionEvent))
    return conversation, domain, shown.time


def kinds(conversation: Conversation, kind: type[Any]) -> list[Any]:
    return [entry.event for entry in conversation.log if isinstance(entry.event, kind)]


@pytest.mark.anyio
async def test_reminded_then_escalated_then_approved_by_the_role_it_escalated_to() -> None:
    clock = Clock()
    conversation, domain, shown = await waiting(clock)
    assert conversation.deadlines == [("sg-1", shown + 60)]
    clock.now = shown + 61
    await conversation.expire_due()
    assert len(kinds(conversation, RemindedEvent)) == 1 and kinds(conversation, EscalatedEvent) == []
    assert conversation.deadlines == [("sg-1", shown + 300)]
    await conversation.expire_due()  # nothing more is due: no second reminder
    assert len(kinds(conversation, RemindedEvent)) == 1
    # before it escalates, the cto may not approve
    await conversation.decide("sg-1", Accept(), by="cy", roles=["cto"])
    assert [r.code for r in kinds(conversation, ApprovalRefusedEvent)] == ["not-a-decider"]
    clock.now = shown + 301
    await conversation.expire_due()
    assert [e.to for e in kinds(conversation, EscalatedEvent)] == [("cto",)]
    card = project(conversation.log).card("sg-1")
    assert card is not None and card.reminded and card.escalated_to == ("cto",)
    assert conversation.deadlines == [("sg-1", shown + 3600)]
    await conversation.decide("sg-1", Accept(), by="cy", roles=["cto"])
    assert domain.ran == [{"table": "users"}]
    assert replay(conversation.log, conversation_id="c-1").divergences == ()


@pytest.mark.anyio
async def test_reminders_come_with_the_next_call_too() -> None:
    clock = Clock()
    conversation, _, shown = await waiting(clock)
    clock.now = shown + 400
    await conversation.decide("sg-1", Accept(), by="bob", roles=["dba"])  # the call fires what is due first
    assert len(kinds(conversation, RemindedEvent)) == 1 and len(kinds(conversation, EscalatedEvent)) == 1


def test_escalating_needs_roles_to_escalate_to() -> None:
    with pytest.raises(ValueError, match="escalate_to"):
        ActionSpec(mutates=True, escalate_after=10)
    with pytest.raises(ValueError, match="remind_after"):
        ActionSpec(mutates=True, remind_after=0)
