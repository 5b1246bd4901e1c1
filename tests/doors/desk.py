"""A person at the desk, deciding on a door's card as another process would: a conversation object of its own on
the store, whose agent is the one outside."""

from __future__ import annotations

from typing import Any

import anyio

from dial_runtime import Conversation
from dial_runtime.agents.outside import OutsideAgent
from dial_runtime.doors.approvals import Approvals
from dial_runtime.doors.gate import Waits
from dial_runtime.driver.built import DeferringHuman
from dial_runtime.ports import StorePort


async def decide(
    store: StorePort, waits: Waits, decision: Any, *, by: str = "ann", domain: Any = None, **options: Any
) -> None:
    """Take ``decision`` on the card ``waits`` names, by ``by``, over ``domain`` (a framework's approvals by
    default); ``options`` are ``decide``'s (``roles``, ``shown``, ...)."""
    conversation = Conversation(
        agent=OutsideAgent(),
        domain=Approvals() if domain is None else domain,
        human=DeferringHuman(),
        store=store,
        conversation_id=waits.conversation_id,
    )
    with anyio.fail_after(30):
        await conversation.decide(waits.card.id, decision, by=by, via="cli", **options)
