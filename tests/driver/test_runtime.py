"""The conversation runtime's contract: turns, the suggestion lifecycle, carry-over, and the rules beyond the
reference runtime. Every test runs on trio (virtual time) and asyncio."""

from __future__ import annotations

import json
import logging
import re
from functools import partial
from types import coroutine as types_coroutine
from typing import Any

import anyio
import pytest

from dial_runtime import (
    Accept,
    Ask,
    Conversation,
    ConversationBusy,
    Dismiss,
    Edit,
    Issue,
    Outcome,
    Say,
    Suggestion,
    parse,
    policy_human,
    scripted_human,
)
from dial_runtime.language.outcomes import outcome_reply
from dial_runtime.language.schema import validate
from dial_runtime.runtime.events import RENDERED

from ..fakes import Agent, Notes, Stall, envelope, hang, make, statuses, suggest, types

pytestmark = pytest.mark.anyio

ADD_MILK = envelope(suggest("add-note"), '<dial-declare context-key="add-note">{"text":"buy milk"}</dial-declare>')
THANKS = envelope("<dial-acknowledge>Noted.</dial-acknowledge>")


# ------------------------------------------------------------------------------------------- the seed's turns


async def test_accepted_suggestion_is_run_reported_and_answered() -> None:
    conversation, agent, events = make([ADD_MILK, THANKS], domain=Notes(context='<context notes="0"/>'))
    result = await conversation.say("add a note: buy milk")
    assert (result.status, result.turns) == ("idle", 2)
    assert statuses(result.outcomes) == [("sg-1", "done")]
    assert result.outcomes[0].result == {"count": 1}
    assert types(events) == ["sent", "reply", "suggestion", "outcome", "sent", "reply", "inform"]
    assert agent.sent[0] == '<context notes="0"/>\n\nadd a note: buy milk'
    report, context = agent.sent[1].split("\n\n")
    assert report == outcome_reply(result.outcomes)
    assert context == '<context notes="0"/>'
    assert validate(report) == []
    assert events[2].preview == "Add the note 'buy milk'" and events[2].mutates is True
    assert events[-1].text == "Noted." and events[-1].act == "acknowledge"


async def test_prose_and_a_reply_without_envelope_are_informs() -> None:
    conversation, _, events = make([envelope("<dial-inform>Hi.</dial-inform>", prose="Hello!"), "just text"])
    await conversation.say("hi")
    await conversation.say("and?")
    informs = [(event.text, event.act) for event in events if event.type == "inform"]
    assert informs == [("Hello!", None), ("Hi.", "inform"), ("just text", None)]


async def test_no_reply_keeps_everything_owed_for_the_next_say() -> None:
    conversation, agent, events = make([ADD_MILK, hang, THANKS], timeout=0.05)
    result = await conversation.say("add a note: buy milk")
    assert (result.status, result.turns) == ("no-reply", 2)
    assert types(events)[-2:] == ["sent", "no-reply"]
    assert events[-1].error == "The agent didn't reply within 0.05s"
    assert conversation.owed == result.outcomes
    again = await conversation.say("still there?")
    assert again.status == "idle" and again.outcomes == ()
    assert agent.sent[2] == outcome_reply(result.outcomes) + "\n\nstill there?"
    assert conversation.owed == ()


async def test_turn_limit_carries_the_last_outcomes() -> None:
    looping = envelope(suggest("list-notes"))
    conversation, agent, events = make([looping, looping, "ok"], max_turns=2)
    result = await conversation.say("go")
    assert (result.status, result.turns) == ("turn-limit", 2)
    assert types(events) == ["sent", "reply", "suggestion", "outcome"] * 2 + ["turn-limit"]
    await conversation.say("next")
    assert agent.sent[-1] == outcome_reply([result.outcomes[-1]]) + "\n\nnext"


async def test_a_failed_send_raises_the_original_error_and_keeps_what_is_owed() -> None:
    class Broken(Exception):
        pass

    def fail(message: str) -> str:
        raise Broken("connection reset")

    conversation, agent, _events = make([ADD_MILK, fail, THANKS])
    with pytest.raises(Broken, match="connection reset"):
        await conversation.say("add a note: buy milk")
    assert [entry.event.type for entry in conversation.log][-2:] == ["send-failed", "finished"]
    assert [outcome.status for outcome in conversation.owed] == ["done"]
    result = await conversation.say("")
    assert result.status == "idle"
    owed_before = [entry.event.outcome for entry in conversation.log if entry.event.type == "outcome"]
    assert agent.sent[-1] == outcome_reply(owed_before)


async def test_an_empty_say_with_nothing_owed_sends_nothing() -> None:
    conversation, agent, _ = make([])
    result = await conversation.say("")
    assert (result.status, result.turns, agent.sent) == ("idle", 0, [])


async def test_suggestion_ids_count_across_says_and_explicit_ids_use_no_number() -> None:
    read = envelope(suggest("list-notes"))
    conversation, _, _ = make([read, "a", envelope(suggest("list-notes", ident="mine")), "b", read, "c"])
    ids = []
    for words in ("one", "two", "three"):
        ids += [outcome.id for outcome in (await conversation.say(words)).outcomes]
    assert ids == ["sg-1", "mine", "sg-2"]


# ---------------------------------------------------------------------------------- the suggestion lifecycle

LIFECYCLE = [
    # (case, reply elements, the person's steps, expected outcome fields, does a turn follow)
    (
        "unknown action is invalid and never shown",
        [suggest("fly", "{}")],
        [],
        {"status": "invalid", "code": "unknown-action", "hint": "There is no action 'fly'.", "preview": ""},
        True,
    ),
    (
        "a refused payload is invalid with the domain's reasons",
        [suggest("add-note", "{}")],
        [],
        {"status": "invalid", "code": "missing-text", "field": "text", "hint": "Give the note's text."},
        True,
    ),
    (
        "a payload that is not JSON is invalid, not silently empty",
        [suggest("add-note", "{text: milk}")],
        [],
        {"status": "invalid", "code": "invalid-payload"},
        True,
    ),
    ("read-only runs without asking", [suggest("list-notes", "{}")], [], {"status": "done"}, True),
    ("hand-off runs without asking", [suggest("open-poll", "{}")], [], {"status": "handed-off"}, False),
    (
        "accept runs",
        [suggest("add-note", '{"text":"milk"}')],
        ["accept"],
        {"status": "done", "result": {"count": 1}, "preview": "Add the note 'milk'"},
        True,
    ),
    (
        "dismiss does not run and starts no turn",
        [suggest("add-note", '{"text":"milk"}')],
        ["dismiss"],
        {"status": "dismissed"},
        False,
    ),
    (
        "a valid edit runs the edited payload",
        [suggest("add-note", '{"text":"milk"}')],
        [{"edit": {"text": "oat milk"}}],
        {"status": "done", "edited": True, "preview": "Add the note 'oat milk'"},
        True,
    ),
    (
        "two refused edits, then a valid one",
        [suggest("add-note", '{"text":"milk"}')],
        [{"edit": {}}, Edit({"text": ""}), Edit({"text": "tea"})],
        {"status": "done", "edited": True, "result": {"count": 1}},
        True,
    ),
    (
        "the third refused edit ends invalid",
        [suggest("add-note", '{"text":"milk"}')],
        [{"edit": {}}, {"edit": {}}, {"edit": {}}],
        {"status": "invalid", "code": "missing-text", "edited": True, "preview": ""},
        True,
    ),
    (
        "accepting a refused edit counts as another refusal",
        [suggest("add-note", '{"text":"milk"}')],
        [{"edit": {}}, "accept", Accept()],
        {"status": "invalid", "code": "missing-text"},
        True,
    ),
    (
        "a failing action reports the error's message, code and hint",
        [suggest("fail-note", "{}")],
        ["accept"],
        {"status": "failed", "error": "the notebook is locked", "code": "locked", "hint": "Unlock it first."},
        True,
    ),
]


@pytest.mark.parametrize(
    ("elements", "steps", "expected", "follows"),
    [case[1:] for case in LIFECYCLE],
    ids=[case[0] for case in LIFECYCLE],
)
async def test_suggestion_lifecycle(
    elements: list[str], steps: list[Any], expected: dict[str, Any], follows: bool
) -> None:
    domain = Notes()
    human = scripted_human(steps)
    conversation, _agent, events = make([envelope(*elements), "ok"], human, domain=domain)
    result = await conversation.say("go")
    (outcome,) = result.outcomes
    for name, value in expected.items():
        assert getattr(outcome, name) == value, name
    assert result.turns == (2 if follows else 1)
    assert len(human.seen) == len(steps)
    shown = [event for event in events if event.type == "suggestion"]
    assert bool(shown) == (outcome.status != "invalid" or outcome.edited)
    ran = outcome.status in ("done", "failed", "handed-off")
    assert len(domain.ran) == ran
    if ran:
        assert domain.validate(outcome.action, domain.ran[0][1]) == {"ok": True}


async def test_a_refused_edit_is_shown_back_with_its_issue() -> None:
    human = scripted_human([{"edit": {"text": ""}}, {"edit": {"text": "oat"}}])
    conversation, _, _ = make([envelope(suggest("add-note", '{"text":"milk"}')), "ok"], human)
    await conversation.say("go")
    first, second = human.seen
    assert first.issue is None
    assert second.issue == Issue(code="missing-text", field="text", hint="Give the note's text.")
    assert second.payload == {"text": ""}


async def test_say_supersedes_the_rest_of_the_reply_and_its_words_go_next() -> None:
    reply = envelope(
        suggest("add-note", '{"text":"a"}'),
        suggest("add-note", '{"text":"b"}'),
        suggest("list-notes", "{}"),
        "<dial-ask>Anything else?</dial-ask>",
    )
    human = scripted_human([Say("actually, nothing")])
    conversation, agent, events = make([reply, "fine"], human)
    result = await conversation.say("go")
    assert statuses(result.outcomes) == [("sg-1", "superseded"), ("sg-2", "superseded"), ("sg-3", "superseded")]
    assert [event.type for event in events if event.type in ("suggestion", "ask")] == ["suggestion", "ask"]
    assert len(human.seen) == 1
    assert agent.sent[1].endswith("\n\nactually, nothing")
    assert result.turns == 2


async def test_a_payload_comes_from_the_declare_right_after_the_suggest() -> None:
    reply = envelope(
        suggest("add-note", '{"text":"own"}'),
        '<dial-declare context-key="x">{"text":"not taken"}</dial-declare>',
    )
    conversation, _, _ = make([reply, "ok"])
    result = await conversation.say("go")
    assert result.outcomes[0].preview == "Add the note 'own'"
    assert conversation.facts == {"x": {"text": "not taken"}}


async def test_a_json_null_payload_is_a_payload_and_leaves_the_declare_alone() -> None:
    reply = envelope(suggest("list-notes", "null"), '<dial-declare context-key="k">1</dial-declare>')
    domain = Notes()
    conversation, _, _ = make([reply, "ok"], domain=domain)
    await conversation.say("go")
    assert domain.ran == [("list-notes", None)]
    assert conversation.facts == {"k": 1}


# -------------------------------------------------------------------------------------------------- asks


async def test_every_answer_goes_back_in_order_then_the_say_text() -> None:
    reply = envelope(
        "<dial-ask>Name?</dial-ask>",
        '<dial-ask response-type="choice">Colour?<dial-option value="r">Red</dial-option></dial-ask>',
        suggest("add-note", '{"text":"x"}'),
        "<dial-ask>Ignored?</dial-ask>",
    )
    human = scripted_human([{"answer": "Ada"}, {"answer": "r"}, {"say": "and hurry"}])
    conversation, agent, events = make([reply, "ok"], human)
    await conversation.say("go")
    assert agent.sent[1].endswith("Ada\n\nr\n\nand hurry")
    asks = [event for event in events if event.type == "ask"]
    assert [ask.text for ask in asks] == ["Name?", "Colour?", "Ignored?"]
    assert asks[1].options[0].label == "Red" and asks[1].response_type == "choice"
    assert [type(item).__name__ for item in human.seen] == ["Ask", "Ask", "Suggestion"]


@pytest.mark.parametrize("answer", ["", None])
async def test_an_empty_answer_means_the_question_stands(answer: Any) -> None:
    conversation, agent, _ = make([envelope("<dial-ask>Name?</dial-ask>")], policy_human(answer_with=answer))
    result = await conversation.say("go")
    assert (result.status, result.turns, len(agent.sent)) == ("idle", 1, 1)


async def test_an_ask_timeout_is_no_answer() -> None:
    class Slow:
        def decide(self, suggestion: Suggestion) -> Any:
            raise AssertionError

        async def answer(self, ask: Ask) -> str:
            await anyio.sleep(5)
            return "too late"

    conversation, _agent, _ = make([envelope('<dial-ask timeout="0.01">Name?</dial-ask>')], Slow())
    result = await conversation.say("go")
    assert (result.status, result.turns) == ("idle", 1)
    answered = [entry.event for entry in conversation.log if entry.event.type == "answered"]
    assert answered[0].expired is True


class Later:
    """An awaitable that is neither a coroutine nor a future: its type only has ``__await__``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Any:
        yield from anyio.sleep(0).__await__()
        return self.value


@types_coroutine
def generator_based(value: Any) -> Any:
    yield from anyio.sleep(0).__await__()
    return value


async def coroutine(value: Any) -> Any:
    await anyio.sleep(0)
    return value


@pytest.mark.parametrize("wrap", [coroutine, Later, generator_based, lambda value: value], ids=str)
async def test_a_plain_human_may_return_any_awaitable(wrap: Any) -> None:
    class Deferring:
        def decide(self, suggestion: Suggestion) -> Any:
            return wrap(Edit({"text": "edited"}))

        def answer(self, ask: Ask) -> Any:
            return wrap("blue")

    reply = envelope("<dial-ask>Colour?</dial-ask>", suggest("add-note", '{"text":"x"}'))
    conversation, agent, _ = make([reply, "ok"], Deferring())
    result = await conversation.say("go")
    assert statuses(result.outcomes) == [("sg-1", "done")] and result.outcomes[0].edited
    assert "blue" in agent.sent[1]


async def test_an_undecided_suggestion_expires_as_dismissed() -> None:
    class Away:
        async def decide(self, suggestion: Suggestion) -> Any:
            await anyio.sleep_forever()

    conversation, _, _ = make([envelope(suggest("add-note", '{"text":"x"}'))], Away(), decide_timeout=0.02)
    result = await conversation.say("go")
    (outcome,) = result.outcomes
    assert (outcome.status, outcome.expired) == ("dismissed", True)
    assert outcome.fact() == {"action": "add-note", "status": "dismissed", "expired": True}
    assert result.status == "idle"


# ------------------------------------------------------------------------------- busy, cancel, callbacks


async def test_a_second_say_while_one_runs_is_refused_at_once() -> None:
    gate = anyio.Event()

    async def slow(message: str) -> str:
        await gate.wait()
        return "done"

    conversation, _, _events = make([slow])
    results = []

    async def first() -> None:
        results.append(await conversation.say("one"))

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        await anyio.sleep(0.01)
        with pytest.raises(ConversationBusy):
            await conversation.say("two")
        gate.set()
    assert results[0].status == "idle"
    assert [entry.event.type for entry in conversation.log].count("said") == 1


async def test_cancelling_during_a_decision_supersedes_and_keeps_outcomes_owed() -> None:
    stall = Stall()

    class Waits:
        async def decide(self, suggestion: Suggestion) -> Any:
            await stall()

    reply = envelope(
        suggest("list-notes", "{}"), suggest("add-note", '{"text":"x"}'), suggest("add-note", '{"text":"y"}')
    )
    conversation, agent, _ = make([reply, "after"], Waits())
    await stall.interrupt(partial(conversation.say, "go"))
    assert statuses(conversation.owed) == [("sg-1", "done"), ("sg-2", "superseded"), ("sg-3", "superseded")]
    types_logged = [entry.event.type for entry in conversation.log]
    assert types_logged[-2:] == ["interrupted", "finished"]
    result = await conversation.say("hello again")
    assert result.status == "idle"
    assert "sg-3:superseded" in agent.sent[-1] and agent.sent[-1].endswith("hello again")


async def test_cancelling_while_the_agent_thinks_leaves_the_conversation_usable() -> None:
    stall = Stall()
    conversation, agent, _ = make([stall, "hi"])
    await stall.interrupt(partial(conversation.say, "first"))
    assert (await conversation.say("second")).status == "idle"
    assert agent.sent == ["first", "second"]


async def test_an_on_event_set_later_is_shown_only_what_happens_from_then_on() -> None:
    conversation = Conversation(agent=Agent([ADD_MILK, THANKS, THANKS]), domain=Notes(), human=policy_human())
    await conversation.say("add milk")
    before = len(conversation.log)
    shown: list[Any] = []
    conversation.on_event = shown.append
    await conversation.say("thanks")
    later = [entry.event for entry in conversation.log[before:]]
    assert shown == [event for event in later if event.type in RENDERED]
    assert shown and conversation.on_event == shown.append


async def test_an_on_event_error_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    def explode(event: Any) -> None:
        raise RuntimeError("render failed")

    conversation = Conversation(
        agent=Agent([ADD_MILK, THANKS]), domain=Notes(), human=policy_human(), on_event=explode
    )
    with caplog.at_level(logging.ERROR, logger="dial_runtime"):
        result = await conversation.say("go")
    assert result.status == "idle" and statuses(result.outcomes) == [("sg-1", "done")]
    assert "render failed" in caplog.text


async def test_a_human_error_propagates_and_what_was_done_stays_owed() -> None:
    class Faulty:
        def decide(self, suggestion: Suggestion) -> Any:
            raise ValueError("the UI crashed")

    reply = envelope(suggest("list-notes", "{}"), suggest("add-note", '{"text":"x"}'))
    conversation, _, _ = make([reply], Faulty())
    with pytest.raises(ValueError, match="the UI crashed"):
        await conversation.say("go")
    assert statuses(conversation.owed) == [("sg-1", "done"), ("sg-2", "superseded")]


@pytest.mark.parametrize(
    ("decision", "shown"),
    [({"accept": 1}, "{'accept': 1}"), (None, "None"), ("yes", "'yes'"), ({"edit": 1, "say": "x"}, "'say'")],
)
async def test_a_decision_of_the_wrong_shape_is_a_type_error(decision: Any, shown: str) -> None:
    class Odd:
        def decide(self, suggestion: Suggestion) -> Any:
            return decision

    conversation, _, _ = make([envelope(suggest("add-note", '{"text":"x"}'))], Odd())
    with pytest.raises(TypeError, match="must be accept, dismiss, edit or say") as caught:
        await conversation.say("go")
    assert shown in str(caught.value)


@pytest.mark.parametrize(
    ("role", "message"),
    [
        ("agent", "agent needs a send() method"),
        ("human", "human needs a decide() method"),
        ("domain", "domain needs a run() method"),
    ],
)
def test_missing_methods_are_named(role: str, message: str) -> None:
    parts: dict[str, Any] = {"agent": Agent([]), "human": policy_human(), "domain": Notes()}
    parts[role] = object()
    with pytest.raises(TypeError, match=f"^Conversation: {re.escape(message)}$"):
        Conversation(**parts)


# ------------------------------------------------------------------------------------- facts and endings


async def test_unpaired_declares_become_facts_but_outcome_keys_do_not() -> None:
    reply = envelope(
        '<dial-declare context-key="user">{"name":"Ada"}</dial-declare>',
        '<dial-declare context-key="user"><dial-payload>{"name":"Grace"}</dial-payload></dial-declare>',
        '<dial-declare context-key="outcome:sg-9">{"status":"done"}</dial-declare>',
        '<dial-declare context-key="mood">cheerful</dial-declare>',
    )
    conversation, _, events = make([reply])
    await conversation.say("go")
    assert conversation.facts == {"user": {"name": "Grace"}, "mood": "cheerful"}
    assert [event.context_key for event in events if event.type == "declare"] == [
        "user",
        "user",
        "outcome:sg-9",
        "mood",
    ]


async def test_session_complete_ends_after_the_reply_is_handled() -> None:
    reply = envelope('<dial-phatic signal="session-complete"/>', suggest("list-notes", "{}"))
    conversation, agent, _events = make([reply])
    result = await conversation.say("bye")
    assert (result.status, result.turns) == ("ended", 1)
    assert statuses(result.outcomes) == [("sg-1", "done")]
    assert conversation.ended
    later = await conversation.say("hello?")
    assert (later.status, later.turns) == ("ended", 0)
    assert len(agent.sent) == 1
    said, finished = (entry.event for entry in conversation.log[-2:])
    assert (said.type, said.text, finished.type, finished.status) == ("said", "hello?", "finished", "ended")
    assert statuses(conversation.owed) == [("sg-1", "done")]


async def test_end_during_a_turn_lets_the_reply_finish_and_no_turn_follow() -> None:
    conversation: Conversation

    def ending(message: str) -> str:
        conversation.end()
        return envelope(suggest("list-notes", "{}"))

    conversation, agent, _ = make([ending])
    result = await conversation.say("go")
    assert (result.status, result.turns, len(agent.sent)) == ("ended", 1, 1)
    assert (await conversation.say("more")).status == "ended"


# ------------------------------------------------------------------------------------ unusable replies


async def test_an_oversized_reply_is_refused_and_the_agent_is_told_why() -> None:
    huge = "<dial><dial-inform>" + "x" * (8 * 1024 * 1024) + "</dial-inform></dial>"
    conversation, agent, _events = make([huge, "sorry"], max_turns=3)
    result = await conversation.say("go")
    assert (result.status, result.turns) == ("idle", 2)
    told = parse(agent.sent[1])
    assert told is not None
    (ack,) = told.elements
    assert (ack.of, ack.yields) == ("reply-1", ("reply-1:invalid",))
    assert "over the limit" in (ack.text or "")
    assert validate(agent.sent[1]) == []


async def test_unusable_replies_count_toward_max_turns() -> None:
    conversation, agent, _ = make(["<dial><<<>>></dial>", "<dial><<>></dial>"], max_turns=2)  # not a repeat
    result = await conversation.say("go")
    assert result.status == "turn-limit"
    assert len(agent.sent) == 2


async def test_results_travel_as_json_and_odd_values_become_strings() -> None:
    class Odd(Notes):
        async def run(self, action: str, payload: Any) -> Any:
            return {"when": anyio, "n": float("nan"), 3: (1, 2)}

    conversation, _agent, _ = make([envelope(suggest("list-notes", "{}")), "ok"], domain=Odd())
    result = await conversation.say("go")
    (outcome,) = result.outcomes
    assert outcome.result == {"when": str(anyio), "n": "nan", "3": [1, 2]}
    json.dumps(outcome.fact(), allow_nan=False)


# ------------------------------------------------------------------------------------------- the humans


def test_policy_human_refuses_other_decisions() -> None:
    with pytest.raises(ValueError, match="'maybe' is not accept or dismiss"):
        policy_human("maybe")


def test_scripted_human_reports_an_exhausted_or_wrong_script() -> None:
    human = scripted_human(["accept", {"answer": "x"}, {"accept": True}])
    suggestion = Suggestion(id="sg-1", action="a")
    assert human.decide(suggestion) == Accept()
    with pytest.raises(TypeError, match="expected a decision"):
        human.decide(suggestion)
    with pytest.raises(TypeError, match="expected a decision"):
        human.decide(suggestion)
    with pytest.raises(LookupError, match="no scripted step left for this ask"):
        human.answer(Ask(id="a-1"))
    assert len(human.seen) == 4


def test_scripted_human_accepts_records_and_dicts() -> None:
    human = scripted_human([Dismiss(), {"edit": {"x": 1}}, {"say": "hi"}, "dismiss"])
    suggestion = Suggestion(id="sg-1", action="a")
    assert [human.decide(suggestion) for _ in range(4)] == [Dismiss(), Edit({"x": 1}), Say("hi"), Dismiss()]


def test_outcomes_are_frozen_records() -> None:
    outcome = Outcome(id="sg-1", action="a", status="done")
    with pytest.raises(AttributeError):
        outcome.status = "failed"  # type: ignore[misc]


def test_every_rendered_event_type_is_documented() -> None:
    assert {"sent", "reply", "inform", "ask", "suggestion", "outcome", "no-reply", "turn-limit"} <= RENDERED


async def test_cancelling_while_an_action_runs_fails_it_as_interrupted() -> None:
    stall = Stall()

    class Stuck(Notes):
        async def run(self, action: str, payload: Any) -> Any:
            await stall()

    reply = envelope(suggest("add-note", '{"text":"x"}'), suggest("add-note", '{"text":"y"}'))
    conversation, _, _ = make([reply], domain=Stuck())
    await stall.interrupt(partial(conversation.say, "go"))
    first, second = conversation.owed
    assert (first.status, first.code, second.status) == ("failed", "interrupted", "superseded")
    assert first.hint == "The turn stopped while the action ran; its effect is unknown."


@pytest.mark.parametrize(
    ("said", "recorded"), [(None, "the call was cancelled"), ("cancelled by ann", "cancelled by ann")]
)
async def test_a_cancellation_is_recorded_in_the_words_the_surface_gives(said: str | None, recorded: str) -> None:
    stall = Stall()
    conversation = Conversation(agent=Agent([stall]), domain=Notes(), human=policy_human())
    if said is None:
        await stall.interrupt(partial(conversation.say, "go"))
    else:

        async def say_then_say_why() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(conversation.say, "go")
                await stall.reached.wait()
                conversation.cancelling(said)
                group.cancel_scope.cancel()

        await say_then_say_why()
    again = Stall()
    conversation.agent = Agent([again])
    await again.interrupt(partial(conversation.say, "again"))  # the words were for the first call only
    reasons = [entry.event.reason for entry in conversation.log if entry.event.type == "interrupted"]
    assert reasons == [recorded, "the call was cancelled"]


async def test_cancelling_while_the_person_answers_keeps_earlier_outcomes() -> None:
    stall = Stall()

    class Thinking:
        def decide(self, suggestion: Suggestion) -> Any:
            return Accept()

        async def answer(self, ask: Ask) -> str:
            await stall()
            raise AssertionError

    reply = envelope(suggest("add-note", '{"text":"x"}'), "<dial-ask>And?</dial-ask>", suggest("list-notes", "{}"))
    conversation, _, _ = make([reply], Thinking())
    await stall.interrupt(partial(conversation.say, "go"))
    assert statuses(conversation.owed) == [("sg-1", "done"), ("sg-2", "superseded")]


@pytest.mark.parametrize("callback", ["validate", "context"])
async def test_domain_callback_errors_propagate(callback: str) -> None:
    class Failing(Notes):
        def validate(self, action: str, payload: Any) -> Any:
            if callback == "validate" and action == "add-note":
                raise KeyError("schema missing")
            return {"ok": True}

        def context(self) -> str:
            if callback == "context" and self.ran:
                raise KeyError("schema missing")
            return ""

    reply = envelope(suggest("list-notes", "{}"), suggest("add-note", '{"text":"x"}'))
    conversation, _, _ = make([reply], domain=Failing())
    with pytest.raises(KeyError, match="schema missing"):
        await conversation.say("go")
    expected = (
        [("sg-1", "done"), ("sg-2", "superseded")]
        if callback == "validate"
        else [
            ("sg-1", "done"),
            ("sg-2", "done"),
        ]
    )
    assert statuses(conversation.owed) == expected
    assert conversation.log[-2].event.type == "interrupted"
