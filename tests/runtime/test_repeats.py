"""A proposal identical (action and payload) to one already done in the conversation: its card is marked on every
surface, the agent hears why the person dismissed it, and a repeatable action is never marked."""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

import msgspec
import pytest

from dial_runtime import ActionSpec, Conversation, Dismiss, project, replay, scripted_human
from dial_runtime.errors import LogError
from dial_runtime.runtime.events import LogEntry, SuggestionEvent
from dial_runtime.terminal.transcript import Transcript

from ..fakes import Notes, envelope, make, suggest

pytestmark = pytest.mark.anyio

MILK = '{"text": "buy milk"}'
OK = envelope("<dial-inform>Noted.</dial-inform>")
CLOCK = 1_700_000_000.0


class RepeatableNotes(Notes):
    """The notes domain, with add-note repeatable (a counter, a log line: doing it twice is meant)."""

    actions: ClassVar[dict[str, Any]] = {**Notes.actions, "add-note": {"mutates": True, "repeatable": True}}


def _proposing(action: str, payload: str) -> str:
    return envelope(suggest(action, payload))


async def _twice(
    first: tuple[str, str], second: tuple[str, str], steps: list[Any], domain: Any = None
) -> Conversation:
    """A conversation whose agent proposes ``first``, then (told its outcome, or on the person's next words)
    ``second``; the person decides by ``steps``; every event is logged at :data:`CLOCK` plus its seq."""
    ticks = iter(range(1000))
    conversation, _, _ = make(
        [_proposing(*first), _proposing(*second), OK, OK],
        scripted_human(steps),
        domain=domain,
        clock=lambda: CLOCK + next(ticks),
    )
    await conversation.say("add a note: buy milk")
    if project(conversation.log).card("sg-2") is None:  # no turn followed the first: the person goes on
        await conversation.say("and again")
    return conversation


CASES = [
    pytest.param(("add-note", MILK), ("add-note", MILK), ["accept", "accept"], None, "sg-1", id="done-then-same"),
    pytest.param(
        ("add-note", MILK), ("add-note", MILK), ["dismiss", "accept"], None, None, id="dismissed-then-same"
    ),
    pytest.param(
        ("add-note", MILK),
        ("add-note", '{"text": "buy oats"}'),
        ["accept", "accept"],
        None,
        None,
        id="other-payload",
    ),
    pytest.param(
        ("add-note", MILK), ("add-note", MILK), ["accept", "accept"], RepeatableNotes(), None, id="repeatable"
    ),
    pytest.param(
        ("add-note", '{"text": "buy mil"}'),
        ("add-note", MILK),
        [{"edit": {"text": "buy milk"}}, "accept"],
        None,
        "sg-1",
        id="edited-to-the-same",
    ),
    pytest.param(
        ("fail-note", MILK), ("fail-note", MILK), ["accept", "dismiss"], None, None, id="failed-then-same"
    ),
    pytest.param(("list-notes", "{}"), ("list-notes", "{}"), [], None, None, id="read-only"),
]


@pytest.mark.parametrize(("first", "second", "steps", "domain", "marked"), CASES)
async def test_a_proposal_done_already_is_marked(
    first: tuple[str, str], second: tuple[str, str], steps: list[Any], domain: Any, marked: str | None
) -> None:
    conversation = await _twice(first, second, steps, domain)
    seen = project(conversation.log)
    card = seen.card("sg-2")
    assert card is not None and card.done_before == marked
    done = seen.card("sg-1")
    assert done is not None
    assert card.done_at == (done.ended_at if marked else None)
    # The mark is the log's: a replay makes it again, and a conversation rebuilt from the log reads it the same.
    assert replay(conversation.log).ok
    rebuilt = Conversation(
        agent=conversation.agent, domain=Notes(), human=conversation.human, log=conversation.log
    )
    assert project(rebuilt.log).card("sg-2") == card
    shown = [entry.event for entry in conversation.log if isinstance(entry.event, SuggestionEvent)]
    assert [event.done_before for event in shown] == [None, marked]


async def test_a_conversation_rebuilt_from_its_log_marks_the_next_repeat() -> None:
    conversation = await _twice(("add-note", MILK), ("add-note", '{"text": "buy oats"}'), ["accept", "accept"])
    rebuilt, _, _ = make([_proposing("add-note", MILK), OK], scripted_human(["accept"]), log=conversation.log)
    await rebuilt.say("once more")
    card = project(rebuilt.log).card("sg-3")
    assert card is not None and card.done_before == "sg-1"


async def test_the_agent_hears_why_a_repeat_was_dismissed() -> None:
    conversation = await _twice(("add-note", MILK), ("add-note", MILK), ["accept", Dismiss()])
    (outcome,) = conversation.owed
    assert (outcome.id, outcome.status, outcome.code) == ("sg-2", "dismissed", "already-done")
    assert outcome.hint is not None and "already done (sg-1" in outcome.hint
    await conversation.say("fine")
    sent = conversation.agent.sent[-1]  # type: ignore[attr-defined]
    assert '"code":"already-done"' in sent and "sg-1" in sent


async def test_the_transcript_and_the_trail_mark_the_card() -> None:
    conversation = await _twice(("add-note", MILK), ("add-note", MILK), ["accept", "accept"])
    lines: list[str] = []
    transcript = Transcript(lines.append)
    for entry in conversation.log:
        transcript.show(entry)
    done = project(conversation.log).card("sg-1")
    assert done is not None and done.ended_at is not None
    at = time.strftime("%H:%M", time.localtime(done.ended_at))
    assert f"agent proposes sg-2: Add the note 'buy milk'  [already done at {at} as sg-1]" in lines
    assert any(m.label == "shown" and "[already done as sg-1]" in m.text for m in project(conversation.log).trail)


def _forged(entries: tuple[LogEntry, ...], done_before: str) -> list[LogEntry]:
    return [
        msgspec.structs.replace(entry, event=msgspec.structs.replace(entry.event, done_before=done_before))
        if isinstance(entry.event, SuggestionEvent) and entry.event.id == "sg-2"
        else entry
        for entry in entries
    ]


@pytest.mark.parametrize(
    ("steps", "second", "names"),
    [
        pytest.param(["dismiss", "accept"], MILK, "sg-1", id="names-one-never-done"),
        pytest.param(["accept", "accept"], '{"text": "buy oats"}', "sg-1", id="another-payload"),
        pytest.param(["accept", "accept"], MILK, "sg-7", id="names-no-suggestion"),
    ],
)
async def test_a_log_that_marks_what_was_not_done_is_refused(steps: list[str], second: str, names: str) -> None:
    conversation = await _twice(("add-note", MILK), ("add-note", second), steps)
    with pytest.raises(LogError, match="marked as done before"):
        Conversation(
            agent=conversation.agent,
            domain=Notes(),
            human=conversation.human,
            log=_forged(conversation.log, names),
        )


def test_a_suggestion_without_the_mark_is_written_as_before() -> None:
    event = SuggestionEvent(
        id="sg-1", action="add-note", text="", payload={}, preview="", destructive=False, mutates=True
    )
    assert "done_before" not in json.loads(msgspec.json.encode(event))
    assert ActionSpec(mutates=True).repeatable is False
