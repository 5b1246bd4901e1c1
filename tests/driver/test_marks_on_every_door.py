"""The marks the log gives a card or a text reach every door alike: what ``on_event`` is shown, the records the
person's port is asked with, the projection and the AG-UI messages read them the same. An acknowledgement the log
contradicts is the agent's claim on each; a proposal done already says so on each."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from dial_runtime import Conversation, Projection, Suggestion, project
from dial_runtime.runtime.events import Event, InformDeltaEvent
from dial_runtime.terminal.transcript import Transcript
from dial_runtime.views.person import AgentText
from dial_runtime.web.mapping import messages_from_log

from ..fakes import Agent, Notes, envelope, suggest

pytestmark = pytest.mark.anyio

MILK = '{"text": "buy milk"}'
INVENTED = '<dial><dial-acknowledge of="sg-3" yield="sg-3:done">Done: deleted all notes.</dial-acknowledge></dial>'


class RecordingHuman:
    """Accepts everything, keeping each record it was asked about."""

    def __init__(self) -> None:
        self.asked: list[Suggestion] = []

    def decide(self, suggestion: Suggestion) -> Any:
        self.asked.append(suggestion)
        return {"accept": True}

    def answer(self, ask: Any) -> str:
        return ""


def watched(agent: Agent, human: Any) -> tuple[Conversation, list[Event | InformDeltaEvent]]:
    shown: list[Event | InformDeltaEvent] = []
    conversation = Conversation(agent=agent, domain=Notes(), human=human, on_event=shown.append)
    return conversation, shown


def door_projection(shown: list[Event | InformDeltaEvent]) -> Projection:
    """The projection a surface builds from what ``on_event`` showed it, and nothing else."""
    seen = Projection()
    for event in shown:
        seen.feed(event)
    return seen


async def test_an_invented_acknowledgement_is_marked_on_every_door() -> None:
    conversation, shown = watched(Agent([INVENTED]), RecordingHuman())
    await conversation.say("delete everything")
    kinds = [event.type for event in shown]
    assert kinds.index("unconfirmed") < len(kinds) - 1 - kinds[::-1].index("inform")
    (logged,) = [item for item in project(conversation.log).items if isinstance(item, AgentText)]
    assert logged.unconfirmed == "this conversation has no 'sg-3'"
    (door,) = [item for item in door_projection(shown).items if isinstance(item, AgentText)]
    assert msgspec.structs.replace(door, seq=logged.seq, time=logged.time) == logged  # events carry no seq
    lines: list[str] = []
    Transcript(lines.append).render(door)
    assert any("not confirmed" in line for line in lines), lines
    messages = [message.model_dump(mode="json") for message in messages_from_log(conversation.log)]
    assert "sg-3" in json.dumps([m.get("metadata") for m in messages if m.get("role") == "assistant"])


async def test_a_proposal_done_already_is_marked_for_the_person_and_on_the_card() -> None:
    human = RecordingHuman()
    replies = [envelope(suggest("add-note", MILK)), envelope(suggest("add-note", MILK)), envelope("")]
    conversation, shown = watched(Agent(replies), human)
    await conversation.say("add a note: buy milk")
    assert [(each.id, each.done_before) for each in human.asked] == [("sg-1", None), ("sg-2", "sg-1")]
    card = project(conversation.log).card("sg-2")
    assert card is not None and card.done_before == "sg-1"
    door = door_projection(shown).card("sg-2")
    assert door is not None and door.done_before == "sg-1"
