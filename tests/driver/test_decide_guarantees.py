"""What ``decide`` and ``answer`` guarantee a surface with many tabs and workers: a decision on what already ended
says who ended it and how; a decision names the payload the person saw and is refused for any other; a refused
edit is shown again as edited; the suggestion carries its action's marks."""

from __future__ import annotations

from typing import Any

import pytest

from dial_runtime import (
    Accept,
    AlreadyDecided,
    Conversation,
    DialError,
    Dismiss,
    Edit,
    PayloadChanged,
    Say,
    Suggestion,
    scripted_human,
)
from dial_runtime.runtime.records import payload_digest

from ..fakes import Agent, Notes, envelope, suggest

pytestmark = pytest.mark.anyio

ONE = envelope(suggest("add-note", '{"text":"a"}'))
TWO = envelope(suggest("add-note", '{"text":"a"}'), suggest("remove-note", '{"text":"b"}'))
ASK = envelope('<dial-ask id="q">Which list?</dial-ask>')


async def waiting(reply: str, deferrals: int = 1) -> Conversation:
    conversation = Conversation(
        agent=Agent([reply, "ok", "ok", "ok"]), domain=Notes(), human=scripted_human(["defer"] * deferrals)
    )
    assert (await conversation.say("go")).status == "awaiting"
    return conversation


@pytest.mark.parametrize(
    ("first", "by", "how"),
    [
        (Accept(), "ada", "accept"),
        (Dismiss(), "bob", "dismiss"),
        (Edit({"text": "c"}), "cy", "edit"),
        (Say("no, later"), "di", "say"),
        (Accept(), None, "accept"),
    ],
)
async def test_deciding_again_says_who_decided_and_how(first: Any, by: str | None, how: str) -> None:
    conversation = await waiting(ONE)
    await conversation.decide("sg-1", first, by=by)
    before = conversation.log
    for again in (Accept(), Dismiss(), Edit({"text": "z"})):
        with pytest.raises(AlreadyDecided) as raised:
            await conversation.decide("sg-1", again, by="eve")
        assert (raised.value.subject_id, raised.value.by, raised.value.how) == ("sg-1", by, how)
    assert conversation.log == before


async def test_a_suggestion_superseded_by_another_decision_says_how_it_ended() -> None:
    conversation = await waiting(TWO, deferrals=2)
    await conversation.decide("sg-1", Say("neither"), by="ada")
    with pytest.raises(AlreadyDecided) as raised:
        await conversation.decide("sg-2", Accept())
    assert (raised.value.by, raised.value.how) == (None, "superseded")


async def test_an_answered_ask_says_who_answered() -> None:
    conversation = await waiting(ASK)
    await conversation.answer("q", "groceries", by="ada")
    with pytest.raises(AlreadyDecided) as raised:
        await conversation.answer("q", "work", by="bob")
    assert (raised.value.subject_id, raised.value.by, raised.value.how) == ("q", "ada", "answered")


async def test_what_never_waited_is_not_already_decided() -> None:
    conversation = await waiting(ONE)
    for call in (conversation.decide("sg-9", Accept()), conversation.answer("ask-1", "x")):
        with pytest.raises(DialError) as raised:
            await call
        assert not isinstance(raised.value, AlreadyDecided)


@pytest.mark.parametrize(
    ("shown", "runs"),
    [
        (payload_digest("add-note", {"text": "a"}), True),
        (None, True),
        (payload_digest("add-note", {"text": "b"}), False),
        (payload_digest("remove-note", {"text": "a"}), False),
        ("sha256:0", False),
    ],
)
async def test_a_decision_runs_only_on_the_payload_the_person_saw(shown: str | None, runs: bool) -> None:
    conversation = await waiting(ONE)
    (pending,) = conversation.pending
    assert isinstance(pending, Suggestion) and pending.digest == payload_digest("add-note", {"text": "a"})
    before = conversation.log
    if runs:
        result = await conversation.decide("sg-1", Accept(), shown=shown)
        assert [(o.id, o.status) for o in result.outcomes] == [("sg-1", "done")]
        return
    with pytest.raises(PayloadChanged) as raised:
        await conversation.decide("sg-1", Accept(), shown=shown)
    assert (raised.value.shown, raised.value.waiting) == (shown, pending.digest)
    assert conversation.log == before


async def test_a_refused_edit_waits_with_the_preview_and_digest_of_the_edited_payload() -> None:
    conversation = await waiting(ONE)
    (shown,) = conversation.pending
    result = await conversation.decide("sg-1", Edit({"text": ""}), by="ada", shown=shown.digest)
    assert result.status == "awaiting"
    (again,) = conversation.pending
    assert isinstance(again, Suggestion) and again.issue is not None and again.issue.code == "missing-text"
    assert (again.payload, again.preview, again.mutates) == ({"text": ""}, "Add the note ''", True)
    with pytest.raises(PayloadChanged):  # a tab still showing the first payload cannot run it
        await conversation.decide("sg-1", Accept(), shown=shown.digest)
    refused = Conversation(agent=Agent([]), domain=Notes(), human=scripted_human([]), log=conversation.log)
    assert refused.pending == conversation.pending  # the fold restores the refreshed preview


async def test_an_accepted_payload_refused_keeps_its_preview() -> None:
    class Strict(Notes):
        def validate(self, action: str, payload: Any) -> Any:
            return {"ok": False, "code": "closed", "hint": "The list is closed."}

    conversation = Conversation(agent=Agent([ONE]), domain=Notes(), human=scripted_human(["defer"]))
    await conversation.say("go")
    conversation.domain = Strict()
    await conversation.decide("sg-1", Accept())
    (again,) = conversation.pending
    assert isinstance(again, Suggestion) and (again.preview, again.issue and again.issue.code) == (
        "Add the note 'a'",
        "closed",
    )
    refused = [entry.event for entry in conversation.log if entry.event.type == "refused"]
    assert [event.preview for event in refused] == [None]  # type: ignore[attr-defined]


async def test_a_suggestion_carries_its_actions_marks() -> None:
    conversation = await waiting(TWO, deferrals=2)
    marks = [
        (each.id, each.mutates, each.destructive) for each in conversation.pending if isinstance(each, Suggestion)
    ]
    assert marks == [("sg-1", True, False), ("sg-2", True, True)]
