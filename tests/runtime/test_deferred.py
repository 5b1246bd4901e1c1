"""Decisions and answers that arrive later: Defer, decide, answer, resume, and a conversation rebuilt between."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dial_runtime import (
    Accept,
    Conversation,
    Defer,
    DialError,
    Dismiss,
    Edit,
    Say,
    Suggestion,
    scripted_human,
)
from dial_runtime.runtime.core import UNKNOWN_EFFECT
from dial_runtime.runtime.events import entry_from_dict, entry_to_dict

from ..fakes import Agent, Notes, envelope, suggest

pytestmark = pytest.mark.anyio

TWO = envelope(suggest("add-note", '{"text":"a"}'), suggest("add-note", '{"text":"b"}'))


def make(replies: list[Any], steps: list[Any], **options: Any) -> tuple[Conversation, Agent, Notes]:
    agent, domain = Agent(replies), Notes()
    return Conversation(agent=agent, domain=domain, human=scripted_human(steps), **options), agent, domain


def logged(conversation: Conversation) -> list[str]:
    return [entry.event.type for entry in conversation.log]


async def test_a_deferred_suggestion_waits_and_runs_when_accepted_later() -> None:
    conversation, agent, domain = make([envelope(suggest("add-note", '{"text":"a"}')), "ok"], [Defer()])
    result = await conversation.say("go")
    assert (result.status, result.turns, result.outcomes) == ("awaiting", 1, ())
    (waiting,) = result.pending
    assert isinstance(waiting, Suggestion) and (waiting.id, waiting.payload) == ("sg-1", {"text": "a"})
    assert conversation.pending == result.pending
    assert domain.ran == [] and len(agent.sent) == 1
    later = await conversation.decide("sg-1", Accept(), by="ada")
    assert (later.status, later.turns) == ("idle", 2)
    assert [(o.id, o.status) for o in later.outcomes] == [("sg-1", "done")]
    assert domain.ran == [("add-note", {"text": "a"})]
    assert "sg-1:done" in agent.sent[1]
    decided = [e.event for e in conversation.log if e.event.type == "decided"]
    assert (decided[0].decision, decided[0].by) == ("accept", "ada")


async def test_the_rest_of_the_reply_goes_on_while_one_suggestion_waits() -> None:
    conversation, agent, _ = make([TWO, "ok"], ["defer", "accept"])
    result = await conversation.say("go")
    assert result.status == "awaiting"
    assert [(o.id, o.status) for o in result.outcomes] == [("sg-2", "done")]
    assert [p.id for p in result.pending] == ["sg-1"]
    assert len(agent.sent) == 1
    later = await conversation.decide("sg-1", {"dismiss": True})
    assert later.status == "idle" and [(o.id, o.status) for o in later.outcomes] == [("sg-1", "dismissed")]
    assert "sg-2:done" in agent.sent[1] and "sg-1:dismissed" in agent.sent[1]


async def test_deciding_what_is_not_pending_changes_nothing() -> None:
    conversation, _, _ = make([envelope(suggest("add-note", '{"text":"a"}'))], ["defer"])
    await conversation.say("go")
    before = conversation.log
    for ident in ("sg-9", "nope"):
        with pytest.raises(DialError, match=f"suggestion '{ident}' is not awaiting a decision"):
            await conversation.decide(ident, Accept())
    with pytest.raises(DialError, match="ask 'ask-1' is not awaiting an answer"):
        await conversation.answer("ask-1", "x")
    assert conversation.log == before


async def test_a_refused_later_edit_keeps_it_pending_with_the_issue_and_logs_both_payloads() -> None:
    conversation, _, domain = make([envelope(suggest("add-note", '{"text":"a"}')), "ok"], ["defer"])
    await conversation.say("go")
    result = await conversation.decide("sg-1", Edit({"text": ""}))
    assert result.status == "awaiting"
    (waiting,) = result.pending
    assert waiting.issue is not None and waiting.issue.code == "missing-text"
    assert waiting.payload == {"text": ""}
    edit = next(e.event for e in conversation.log if e.event.type == "decided")
    assert (edit.previous, edit.payload) == ({"text": "a"}, {"text": ""})
    await conversation.decide("sg-1", Accept())
    last = await conversation.decide("sg-1", Accept())
    assert [(o.status, o.code) for o in last.outcomes] == [("invalid", "missing-text")]
    assert domain.ran == []


async def test_say_as_a_later_decision_supersedes_every_waiting_suggestion() -> None:
    conversation, agent, _ = make([TWO, "ok"], ["defer", "defer"])
    result = await conversation.say("go")
    assert [p.id for p in result.pending] == ["sg-1", "sg-2"]
    later = await conversation.decide("sg-2", Say("neither, thanks"))
    assert [(o.id, o.status) for o in later.outcomes] == [("sg-2", "superseded"), ("sg-1", "superseded")]
    assert later.status == "idle" and agent.sent[1].endswith("neither, thanks")


async def test_a_deferred_ask_is_answered_later() -> None:
    reply = envelope('<dial-ask id="q">Which list?</dial-ask>', suggest("list-notes", "{}"))
    conversation, agent, _ = make([reply, "ok"], ["defer"])
    result = await conversation.say("go")
    assert result.status == "awaiting" and [p.id for p in result.pending] == ["q"]
    later = await conversation.answer("q", "groceries", by="ada")
    assert later.status == "idle"
    assert agent.sent[1].endswith("groceries") and "sg-1:done" in agent.sent[1]


async def test_new_words_while_decisions_wait_supersede_them() -> None:
    conversation, agent, _ = make([TWO, "fine"], ["defer", "accept"])
    await conversation.say("go")
    result = await conversation.say("forget it")
    assert result.status == "idle"
    assert "sg-1:superseded" in agent.sent[1] and "sg-2:done" in agent.sent[1]
    assert agent.sent[1].endswith("forget it")
    assert conversation.pending == ()


async def test_a_rebuilt_conversation_takes_the_decision() -> None:
    first, _, _ = make([envelope(suggest("add-note", '{"text":"a"}'))], ["defer"])
    await first.say("go")
    stored = [json.loads(json.dumps(entry_to_dict(entry))) for entry in first.log]
    agent, domain = Agent(["ok"]), Notes()
    second = Conversation(
        agent=agent, domain=domain, human=scripted_human([]), log=[entry_from_dict(data) for data in stored]
    )
    assert [p.id for p in second.pending] == ["sg-1"]
    result = await second.decide("sg-1", Accept())
    assert result.status == "idle" and domain.ran == [("add-note", {"text": "a"})]
    assert "sg-1:done" in agent.sent[0]


def cut_after(conversation: Conversation, kind: str, ident: str) -> list[Any]:
    """The log as a process killed right after this event would have left it."""
    log = list(conversation.log)
    index = next(
        i
        for i, e in enumerate(log)
        if e.event.type == kind
        and ident in (getattr(e.event, "id", None), getattr(e.event, "suggestion_id", None))
    )
    return log[: index + 1]


async def test_an_action_cut_short_by_a_crash_is_never_run_again() -> None:
    original, _, _ = make([TWO, "ok"], ["accept", "accept"])
    await original.say("go")
    agent, domain = Agent(["ok"]), Notes()
    rebuilt = Conversation(
        agent=agent,
        domain=domain,
        human=scripted_human(["accept"]),
        log=cut_after(original, "action-started", "sg-1"),
    )
    result = await rebuilt.resume()
    assert result.status == "idle"
    assert [(o.id, o.status) for o in result.outcomes] == [("sg-2", "done")]
    assert domain.ran == [("add-note", {"text": "b"})]
    assert "sg-1:failed" in agent.sent[0] and "sg-2:done" in agent.sent[0]
    interrupted = next(e.event for e in rebuilt.log if e.event.type == "outcome" and e.event.id == "sg-1")
    assert (interrupted.code, interrupted.hint) == ("interrupted", UNKNOWN_EFFECT)


async def test_a_decision_cut_short_by_a_crash_waits_as_if_deferred() -> None:
    original, _, _ = make([TWO, "ok"], ["accept", "accept"])
    await original.say("go")
    agent, domain = Agent(["ok"]), Notes()
    rebuilt = Conversation(
        agent=agent, domain=domain, human=scripted_human([]), log=cut_after(original, "suggestion", "sg-2")
    )
    assert rebuilt.pending == ()  # building it changed nothing: the first call recovers
    waiting = await rebuilt.resume()
    assert waiting.status == "awaiting" and [p.id for p in waiting.pending] == ["sg-2"]
    result = await rebuilt.decide("sg-2", Accept())
    assert result.status == "idle" and domain.ran == [("add-note", {"text": "b"})]
    assert "sg-1:done" in agent.sent[0] and "sg-2:done" in agent.sent[0]


def test_defer_is_a_decision_in_dict_form_too() -> None:
    from dial_runtime.runtime.records import as_decision

    assert as_decision({"defer": True}) == Defer()
    assert as_decision(Dismiss()) == Dismiss()
