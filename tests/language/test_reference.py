"""The reference runtime's behaviours (SPEC-NOTES §4) and its runtime bugs (§5), one test each.

Where this library deliberately differs from the reference, the test asserts this library's behaviour and says
"reference: X; here: Y because Z". Every async test runs on trio (virtual time) and asyncio.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import anyio
import pytest

from dial_runtime import (
    Accept,
    Ask,
    Conversation,
    Dismiss,
    Edit,
    Issue,
    Outcome,
    Suggestion,
    policy_human,
    scripted_human,
)
from dial_runtime.language.outcomes import STATUSES, outcome_reply
from dial_runtime.runtime.events import RENDERED, TurnLimitEvent
from dial_runtime.statemachines import NEEDS_REPLY, OUTCOME_STATUS

from ..fakes import Agent, Notes, envelope, hang, make, statuses, suggest, types

pytestmark = pytest.mark.anyio

CONTEXT = '<context notes="0"/>'


class Bare:
    """A domain with only what the constructor checks: ``run`` (and ``actions`` when given)."""

    def __init__(self, actions: dict[str, Any] | None = None) -> None:
        if actions is not None:
            self.actions = actions
        self.ran: list[tuple[str, Any]] = []

    def run(self, action: str, payload: Any) -> Any:
        self.ran.append((action, payload))
        return None


class DecideOnly:
    """A person with ``decide`` and no ``answer``."""

    def decide(self, suggestion: Suggestion) -> Any:
        return Accept()


class Trips(Notes):
    """Notes whose ``method`` (``validate`` or ``context``) raises on its ``call``-th call, once."""

    def __init__(self, method: str = "", call: int = 0, context: str = "") -> None:
        super().__init__(context)
        self.method = method
        self.call = call
        self.calls: Counter[str] = Counter()

    def _trip(self, method: str) -> None:
        self.calls[method] += 1
        if method == self.method and self.calls[method] == self.call:
            raise RuntimeError(f"{method} broke")

    def validate(self, action: str, payload: Any) -> Any:
        self._trip("validate")
        return super().validate(action, payload)

    def context(self) -> str:
        self._trip("context")
        return super().context()


# ------------------------------------------------------------------------------------------ 4.1 constructor


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        (("agent", "human", "domain"), "agent needs a send() method"),
        (("human", "domain"), "human needs a decide() method"),
        (("agent", "domain"), "agent needs a send() method"),
    ],
    ids=["all missing: agent first", "human before domain", "agent before domain"],
)
def test_constructor_checks_agent_then_human_then_domain(missing: tuple[str, ...], message: str) -> None:
    class NotCallable:
        send = decide = run = "not a function"

    parts: dict[str, Any] = {"agent": Agent([]), "human": policy_human(), "domain": Notes()}
    for role in missing:
        parts[role] = NotCallable()
    with pytest.raises(TypeError, match=f"^Conversation: {re.escape(message)}$"):
        Conversation(**parts)


async def test_constructor_defaults_and_fresh_state() -> None:
    """90 s timeout and 8 turns by default; a new conversation owes nothing and knows no facts."""
    looping = envelope(suggest("list-notes", "{}"))
    conversation, agent, events = make([looping] * 8)
    assert (conversation.timeout, conversation.max_turns) == (90.0, 8)
    assert (conversation.owed, conversation.facts, conversation.ended, conversation.log) == ((), {}, False, ())
    result = await conversation.say("go")
    assert (result.status, result.turns, len(agent.sent)) == ("turn-limit", 8, 8)
    assert events[-1] == TurnLimitEvent(turns=8)


async def test_a_domain_without_actions_knows_no_action() -> None:
    conversation, _, _ = make([envelope(suggest("list-notes", "{}")), "ok"], domain=Bare())
    result = await conversation.say("go")
    assert [(o.status, o.code) for o in result.outcomes] == [("invalid", "unknown-action")]


async def test_validate_preview_context_and_answer_are_optional() -> None:
    """reference: validate and answer are called unconditionally, so a missing one throws; here: a missing
    validate accepts every payload and a missing answer leaves the ask unanswered, because the constructor
    treats them as optional parts (preview and context are optional in both)."""
    domain = Bare({"list-notes": {"mutates": False}})
    reply = envelope("<dial-ask>Name?</dial-ask>", suggest("list-notes", '{"n":1}'))
    conversation, agent, events = make([reply, "ok"], DecideOnly(), domain=domain)
    result = await conversation.say("go")
    assert (result.status, result.turns) == ("idle", 2)
    (outcome,) = result.outcomes
    assert (outcome.status, outcome.preview) == ("done", "list-notes")
    assert domain.ran == [("list-notes", {"n": 1})]
    assert "ask" in types(events)
    assert agent.sent == ["go", outcome_reply(result.outcomes)]


VALIDATE_RESULTS = [
    ("None accepts", None, {"action": "list-notes", "status": "done", "result": {"notes": []}}),
    ("ok true accepts", {"ok": True}, {"action": "list-notes", "status": "done", "result": {"notes": []}}),
    (
        "ok false with a code only",
        {"ok": False, "code": "c"},
        {"action": "list-notes", "status": "invalid", "code": "c"},
    ),
    (
        "an Issue record",
        Issue(field="f", hint="h"),
        {"action": "list-notes", "status": "invalid", "field": "f", "hint": "h"},
    ),
]


@pytest.mark.parametrize(
    ("verdict", "fact"), [case[1:] for case in VALIDATE_RESULTS], ids=[case[0] for case in VALIDATE_RESULTS]
)
async def test_validate_results_and_only_defined_issue_fields_are_reported(
    verdict: Any, fact: dict[str, Any]
) -> None:
    class Judged(Notes):
        def validate(self, action: str, payload: Any) -> Any:
            return verdict

    conversation, _, _ = make([envelope(suggest("list-notes", "{}")), "ok"], domain=Judged())
    (outcome,) = (await conversation.say("go")).outcomes
    assert outcome.fact() == fact


async def test_a_validate_result_of_the_wrong_shape_is_a_type_error() -> None:
    class Sloppy(Notes):
        def validate(self, action: str, payload: Any) -> Any:
            return True

    conversation, _, _ = make([envelope(suggest("list-notes", "{}"))], domain=Sloppy())
    with pytest.raises(TypeError, match=r"domain\.validate must return"):
        await conversation.say("go")


class Broken(Exception):
    pass


class Refused(Exception):
    """Not an ActionError, but it carries a code, field and hint."""

    code = "quota"
    field = "count"
    hint = "Try fewer."


RUNS = [
    ("None: no result", lambda: None, {"status": "done"}),
    ("a falsy result is still a result", lambda: 0, {"status": "done", "result": 0}),
    (
        "any exception's code, field and hint",
        Refused("over quota"),
        {"status": "failed", "error": "over quota", "code": "quota", "field": "count", "hint": "Try fewer."},
    ),
    (
        "reference: the exception's message; here: an exception without a code was not raised on purpose, so its "
        "text (which may hold a password) stays out of the log, and the agent is told its type",
        RuntimeError("cannot reach postgresql://app:pw@db"),
        {"status": "failed", "error": "the action raised RuntimeError", "code": "unexpected-error"},
    ),
]


@pytest.mark.parametrize(("behaviour", "fact"), [case[1:] for case in RUNS], ids=[case[0] for case in RUNS])
async def test_a_plain_run_function_results_and_errors(behaviour: Any, fact: dict[str, Any]) -> None:
    class Plain(Notes):
        def run(self, action: str, payload: Any) -> Any:  # type: ignore[override]
            self.ran.append((action, payload))
            if isinstance(behaviour, BaseException):
                raise behaviour
            return behaviour()

    domain = Plain()
    conversation, _, _ = make([envelope(suggest("list-notes", "{}")), "ok"], domain=domain)
    (outcome,) = (await conversation.say("go")).outcomes
    assert outcome.fact() == {"action": "list-notes", **fact}
    assert domain.ran == [("list-notes", {})]


# ------------------------------------------------------------------------------- 4.2 say and the turn loop


async def test_dismissed_outcomes_of_a_turn_that_continues_go_with_that_turn() -> None:
    reply = envelope(suggest("add-note", '{"text":"a"}'), suggest("list-notes", "{}"))
    conversation, agent, _ = make([reply, "ok"], policy_human("dismiss"))
    result = await conversation.say("go")
    assert statuses(result.outcomes) == [("sg-1", "dismissed"), ("sg-2", "done")]
    assert (result.status, result.turns) == ("idle", 2)
    assert agent.sent[1] == outcome_reply(result.outcomes)
    assert conversation.owed == ()


@pytest.mark.parametrize("text", ["", None])
async def test_an_empty_say_with_nothing_owed_sends_not_even_the_context(text: str | None) -> None:
    """reference: say('') with nothing owed spends a turn on a context-only message (§5.30); here: nothing is
    sent and say returns idle with 0 turns, because there is nothing to tell the agent."""
    conversation, agent, events = make([], domain=Notes(context=CONTEXT))
    result = await conversation.say(text)
    assert (result.status, result.turns, result.outcomes, agent.sent, events) == ("idle", 0, (), [], [])


async def test_words_of_a_later_turn_that_got_no_reply_go_first_with_the_next_say() -> None:
    """Owed outcomes, then the context, then the owed answer, then the new words (§4.2 step 1, §4.3, §4.8)."""
    reply = envelope(suggest("list-notes", "{}"), "<dial-ask>Name?</dial-ask>")
    conversation, agent, _ = make(
        [reply, hang, "hi"], policy_human(answer_with="Ada"), domain=Notes(context=CONTEXT), timeout=0.02
    )
    first = await conversation.say("go")
    assert (first.status, first.turns) == ("no-reply", 2)
    assert agent.sent[1] == outcome_reply(first.outcomes) + f"\n\n{CONTEXT}\n\nAda"
    again = await conversation.say("next")
    assert again.outcomes == ()
    assert agent.sent[2] == outcome_reply(first.outcomes) + f"\n\n{CONTEXT}\n\nAda\n\nnext"
    assert conversation.owed == ()


async def test_turn_limit_keeps_the_last_turns_words_and_a_failed_first_send_keeps_them_too() -> None:
    """reference: a failed first send drops the previously owed words merged into it (§5.28); here: they stay
    owed with the outcomes, because only the caller's own new words belong to the caller."""
    reply = envelope(suggest("list-notes", "{}"), "<dial-ask>Name?</dial-ask>")

    def fail(message: str) -> str:
        raise Broken("connection reset")

    conversation, agent, _ = make([reply, fail, "ok"], policy_human(answer_with="Ada"), max_turns=1)
    first = await conversation.say("go")
    assert (first.status, first.turns, len(agent.sent)) == ("turn-limit", 1, 1)
    owed = outcome_reply(first.outcomes)
    with pytest.raises(Broken):
        await conversation.say("new words")
    assert agent.sent[1] == owed + "\n\nAda\n\nnew words"
    result = await conversation.say("")
    assert result.status == "idle"
    assert agent.sent[2] == owed + "\n\nAda"


async def test_max_turns_zero_sends_nothing_and_keeps_what_was_owed() -> None:
    """reference and here: nothing is sent and the caller's words are not kept; what was owed before stays."""
    conversation, agent, events = make(
        [envelope(suggest("add-note", '{"text":"x"}')), "ok"], policy_human("dismiss")
    )
    await conversation.say("go")
    owed = conversation.owed
    assert statuses(owed) == [("sg-1", "dismissed")]
    conversation.max_turns = 0
    events.clear()
    result = await conversation.say("lost")
    assert (result.status, result.turns, result.outcomes) == ("turn-limit", 0, ())
    assert events == [TurnLimitEvent(turns=0)]
    assert len(agent.sent) == 1 and conversation.owed == owed
    conversation.max_turns = 8
    await conversation.say("")
    assert agent.sent[1] == outcome_reply(owed)


# ------------------------------------------------------------------------------------------------ 4.3 compose


async def test_context_is_asked_for_every_message_and_empty_parts_are_left_out() -> None:
    class Contexts(Notes):
        def __init__(self) -> None:
            super().__init__()
            self.given: list[str | None] = [CONTEXT, "", None]

        def context(self) -> Any:
            return self.given.pop(0)

    domain = Contexts()
    looping = envelope(suggest("list-notes", "{}"))
    conversation, agent, _ = make([looping, looping, "ok"], domain=domain)
    result = await conversation.say("go")
    assert result.turns == 3 and domain.given == []
    assert agent.sent == [
        f"{CONTEXT}\n\ngo",
        outcome_reply(result.outcomes[:1]),
        outcome_reply(result.outcomes[1:]),
    ]


# ------------------------------------------------------------------------------------- 4.4 handling a reply


@pytest.mark.parametrize("reply", ["  \n\t ", "", None], ids=["blank", "empty", "None"])
async def test_a_reply_with_no_text_emits_no_inform(reply: str | None) -> None:
    conversation, _, events = make([reply])
    result = await conversation.say("go")
    assert (result.status, result.turns) == ("idle", 1)
    assert types(events) == ["sent", "reply"]
    assert events[1].text == (reply or "")


async def test_payload_only_informs_and_empty_acknowledges_emit_nothing() -> None:
    reply = envelope(
        '<dial-inform><dial-payload>{"a":1}</dial-payload></dial-inform>',
        '<dial-acknowledge of="sg-1"/>',
        "<dial-inform>Shown.</dial-inform>",
    )
    conversation, _, events = make([reply])
    await conversation.say("go")
    assert [(e.text, e.act) for e in events if e.type == "inform"] == [("Shown.", "inform")]


async def test_an_ask_without_text_or_options() -> None:
    human = scripted_human([{"answer": 42}])
    conversation, agent, events = make(["<dial><dial-ask/></dial>", "ok"], human)
    await conversation.say("go")
    (ask,) = [e for e in events if e.type == "ask"]
    assert (ask.text, ask.response_type, ask.options) == ("", "text", ())
    assert (human.seen[0].text, human.seen[0].options) == ("", ())
    assert agent.sent[1] == "42"


ASKS = [
    ("an empty answer in between is skipped", [{"answer": "Ada"}, {"answer": ""}, {"answer": "r"}], "Ada\n\nr"),
    ("a None answer in between is skipped", [{"answer": None}, {"answer": "Ada"}, {"answer": "r"}], "Ada\n\nr"),
    ("no answer at all: no turn follows", [{"answer": ""}, {"answer": None}, {"answer": ""}], None),
]


@pytest.mark.parametrize(("steps", "sent"), [case[1:] for case in ASKS], ids=[case[0] for case in ASKS])
async def test_several_asks_every_non_empty_answer_goes_back_in_order(steps: list[Any], sent: str | None) -> None:
    """reference: the last answer wins, an empty one included (§5.24, §5.25); here: every non-empty answer goes
    back in order and an empty one adds no turn, because each answer is the person's words."""
    reply = envelope("<dial-ask>A?</dial-ask>", "<dial-ask>B?</dial-ask>", "<dial-ask>C?</dial-ask>")
    conversation, agent, _ = make([reply, "ok"], scripted_human(steps))
    result = await conversation.say("go")
    assert result.turns == (1 if sent is None else 2)
    assert agent.sent[1:] == ([] if sent is None else [sent])


PAYLOADS = [
    # (case, elements, expected (status, code), payload run or None, facts)
    (
        "the next declare's dial-payload",
        [
            suggest("add-note"),
            '<dial-declare context-key="k"><dial-payload>{"text":"a"}</dial-payload></dial-declare>',
        ],
        ("done", None),
        {"text": "a"},
        {},
    ),
    (
        "pairing is by position only: any context-key is taken",
        [suggest("add-note"), '<dial-declare context-key="unrelated">{"text":"a"}</dial-declare>'],
        ("done", None),
        {"text": "a"},
        {},
    ),
    (
        "a declare after another element is not the payload",
        [
            suggest("list-notes"),
            "<dial-inform>x</dial-inform>",
            '<dial-declare context-key="k">{"text":"a"}</dial-declare>',
        ],
        ("done", None),
        {},
        {"k": {"text": "a"}},
    ),
    (
        "an empty declare gives an empty payload and is used up",
        [suggest("list-notes"), '<dial-declare context-key="k"></dial-declare>'],
        ("done", None),
        {},
        {},
    ),
    (
        "no payload and no declare gives an empty payload",
        [suggest("list-notes")],
        ("done", None),
        {},
        {},
    ),
    (
        "reference: a bare declare body that is not JSON gives {}; here: invalid 'invalid-payload', because the "
        "agent should learn its payload was unreadable",
        [suggest("list-notes"), '<dial-declare context-key="k">{text: a}</dial-declare>'],
        ("invalid", "invalid-payload"),
        None,
        {},
    ),
    (
        "reference: a non-JSON dial-payload is lost; here: its text is the payload, because its type says so",
        ['<dial-suggest action="list-notes"><dial-payload type="text/plain">hello</dial-payload></dial-suggest>'],
        ("done", None),
        "hello",
        {},
    ),
]


@pytest.mark.parametrize(
    ("elements", "expected", "ran", "facts"), [case[1:] for case in PAYLOADS], ids=[case[0] for case in PAYLOADS]
)
async def test_where_a_suggestions_payload_comes_from(
    elements: list[str], expected: tuple[str, str | None], ran: Any, facts: dict[str, Any]
) -> None:
    domain = Notes()
    conversation, _, _ = make([envelope(*elements), "ok"], domain=domain)
    (outcome,) = (await conversation.say("go")).outcomes
    assert (outcome.status, outcome.code) == expected
    assert [payload for _, payload in domain.ran] == ([] if ran is None else [ran])
    assert conversation.facts == facts


async def test_execute_delegate_and_phatic_are_shown_and_nothing_runs() -> None:
    """reference: execute, delegate, phatic and unpaired declares are ignored without an event (§5.21); here:
    each is an event (a declare without a context-key stays silent), nothing runs and no turn follows, because
    a surface should see everything the agent said."""
    reply = envelope(
        '<dial-execute id="x1"><step id="s1" yield="s1:done">ls -la</step></dial-execute>',
        '<dial-delegate to="billing" intent="refund">Please refund'
        '<dial-context><dial-payload>{"n":2}</dial-payload></dial-context></dial-delegate>',
        '<dial-phatic signal="typing"/>',
        '<dial-declare>{"no":"key"}</dial-declare>',
    )
    domain = Notes()
    conversation, agent, events = make([reply], domain=domain)
    result = await conversation.say("go")
    assert (result.status, result.turns, result.outcomes, len(agent.sent)) == ("idle", 1, (), 1)
    assert types(events) == ["sent", "reply", "execute", "delegate", "phatic"]
    execute, delegate, phatic = events[2:]
    assert (execute.id, [step.command for step in execute.steps]) == ("x1", ["ls -la"])
    assert (delegate.to, delegate.intent, delegate.text, delegate.payload) == (
        "billing",
        "refund",
        "Please refund",
        {"n": 2},
    )
    assert phatic.signal == "typing"
    assert (domain.ran, conversation.facts, conversation.ended) == ([], {}, False)


async def test_an_unpaired_declare_keeps_a_text_payload_as_its_fact() -> None:
    """A ``dial-payload`` whose type is not JSON is its text, for a fact as for a suggestion's payload."""
    text_payload = '<dial-payload type="text/plain">hello</dial-payload>'
    reply = envelope(
        f'<dial-declare context-key="note">{text_payload}</dial-declare>',
        suggest("list-notes"),
        f'<dial-declare context-key="paired">{text_payload}</dial-declare>',
    )
    domain = Notes()
    conversation, _, events = make([reply, "ok"], domain=domain)
    await conversation.say("go")
    assert domain.ran == [("list-notes", "hello")]
    assert [(e.context_key, e.value) for e in events if e.type == "declare"] == [("note", "hello")]
    assert conversation.facts == {"note": "hello"}


async def test_elements_are_handled_in_document_order_whatever_observe_yield_and_addressee_say() -> None:
    """reference and here (§5.20): observe, yield and addressed-to do not reorder or skip elements."""
    reply = envelope(
        '<dial-suggest id="late" action="list-notes" observe="first:done"/>',
        '<dial-suggest id="first" action="list-notes" yield="first:done" addressed-to="someone-else"/>',
    )
    conversation, _, _ = make([reply, "ok"])
    result = await conversation.say("go")
    assert statuses(result.outcomes) == [("late", "done"), ("first", "done")]


# ----------------------------------------------------------------------------------- 4.5 suggestion lifecycle


async def test_ids_and_actions_an_agent_left_empty() -> None:
    reply = envelope('<dial-suggest id="" action="list-notes"/>', "<dial-suggest>hm</dial-suggest>")
    conversation, _, _ = make([reply, "ok"])
    result = await conversation.say("go")
    first, second = result.outcomes
    assert (first.id, first.action, first.status) == ("sg-1", "list-notes", "done")
    assert (second.id, second.action, second.status, second.code) == ("sg-2", "", "invalid", "unknown-action")
    assert second.hint == "There is no action ''."


@pytest.mark.parametrize("action", ["toString", "constructor", "__class__", "__init__", "get"])
async def test_object_attribute_names_are_unknown_actions(action: str) -> None:
    """reference: a plain-object lookup makes toString and constructor known read-only actions (§5.27); here:
    unknown, because actions are looked up in a mapping by key."""
    domain = Notes()
    conversation, _, events = make([envelope(suggest(action, "{}")), "ok"], domain=domain)
    (outcome,) = (await conversation.say("go")).outcomes
    assert (outcome.status, outcome.code, outcome.preview) == ("invalid", "unknown-action", "")
    assert domain.ran == [] and "suggestion" not in types(events)


async def test_the_suggestion_shows_the_agents_text_destructive_and_mutates() -> None:
    human = scripted_human(["dismiss"])
    reply = envelope(suggest("remove-note", '{"text":"x"}', text="Shall I remove it?"))
    conversation, _, events = make([reply], human)
    await conversation.say("go")
    (shown,) = [e for e in events if e.type == "suggestion"]
    assert (shown.id, shown.action, shown.text, shown.payload) == (
        "sg-1",
        "remove-note",
        "Shall I remove it?",
        {"text": "x"},
    )
    assert (shown.preview, shown.destructive, shown.mutates) == ("remove-note", True, True)
    assert human.seen == [
        Suggestion(
            id="sg-1",
            action="remove-note",
            text="Shall I remove it?",
            payload={"text": "x"},
            preview="remove-note",
            destructive=True,
            mutates=True,
        )
    ]


PREVIEWS = [
    ("empty", lambda action, payload: ""),
    ("None", lambda action, payload: None),
    ("raises", lambda action, payload: 1 / 0),
    ("None instead of a function", None),
]


@pytest.mark.parametrize("preview", [case[1] for case in PREVIEWS], ids=[case[0] for case in PREVIEWS])
async def test_the_preview_falls_back_to_the_action_name(preview: Any) -> None:
    domain = Notes()
    domain.preview = preview  # type: ignore[method-assign]
    conversation, _, events = make([envelope(suggest("add-note", '{"text":"x"}')), "ok"], domain=domain)
    (outcome,) = (await conversation.say("go")).outcomes
    assert (outcome.status, outcome.preview) == ("done", "add-note")
    assert [e.preview for e in events if e.type == "suggestion"] == ["add-note"]


async def test_after_a_say_decision_the_rest_is_validated_then_superseded() -> None:
    """reference: after a say decision every known action is superseded without validation; here: an invalid
    payload is still invalid and a valid one superseded with its preview, because validation comes first."""
    reply = envelope(
        suggest("add-note", '{"text":"a"}'),
        suggest("add-note", "{}"),
        suggest("add-note", '{"text":"b"}'),
        suggest("fly", "{}"),
        suggest("list-notes", "{}"),
    )
    human = scripted_human([{"say": "instead"}])
    domain = Notes()
    conversation, agent, events = make([reply, "ok"], human, domain=domain)
    result = await conversation.say("go")
    assert [(o.id, o.status, o.code, o.preview) for o in result.outcomes] == [
        ("sg-1", "superseded", None, "Add the note 'a'"),
        ("sg-2", "invalid", "missing-text", ""),
        ("sg-3", "superseded", None, "Add the note 'b'"),
        ("sg-4", "invalid", "unknown-action", ""),
        ("sg-5", "superseded", None, "list-notes"),
    ]
    assert [e.id for e in events if e.type == "suggestion"] == ["sg-1"]
    assert domain.ran == [] and len(human.seen) == 1
    assert agent.sent[1] == outcome_reply(result.outcomes) + "\n\ninstead"


class Failing(Notes):
    """Notes whose list-notes and open-poll raise, or return ``value`` when it is given."""

    def __init__(self, value: Any = None) -> None:
        super().__init__()
        self.value = value

    async def run(self, action: str, payload: Any) -> Any:
        self.ran.append((action, payload))
        if self.value is None:
            raise Broken("service down")
        return self.value


UNEXPECTED = {"status": "failed", "error": "the action raised Broken", "code": "unexpected-error"}
UNASKED = [
    ("a read-only action that raises fails", "list-notes", None, UNEXPECTED, 2),
    ("a hand-off that raises fails", "open-poll", None, UNEXPECTED, 2),
    ("a hand-off keeps its result", "open-poll", {"poll": 7}, {"status": "handed-off", "result": {"poll": 7}}, 1),
]


@pytest.mark.parametrize(
    ("action", "value", "fact", "turns"), [case[1:] for case in UNASKED], ids=[case[0] for case in UNASKED]
)
async def test_read_only_and_hand_off_actions_run_without_asking(
    action: str, value: Any, fact: dict[str, Any], turns: int
) -> None:
    human = scripted_human([])
    conversation, _, _ = make([envelope(suggest(action, "{}")), "ok"], human, domain=Failing(value))
    result = await conversation.say("go")
    (outcome,) = result.outcomes
    assert outcome.fact() == {"action": action, **fact}
    assert (result.turns, human.seen) == (turns, [])


async def test_accept_validates_the_payload_once_more_and_three_refusals_end_invalid() -> None:
    """reference: accept runs the current payload without validating it (§5.26); here: it is validated again
    and a refusal counts toward the three, because only payloads the domain accepts may run."""

    class Changing(Notes):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def validate(self, action: str, payload: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                return {"ok": True}
            return {"ok": False, "code": "stale", "field": "text", "hint": f"refusal {self.calls - 1}"}

    human = scripted_human(["accept", Accept(), "accept"])
    domain = Changing()
    conversation, _, _ = make([envelope(suggest("add-note", '{"text":"x"}')), "ok"], human, domain=domain)
    (outcome,) = (await conversation.say("go")).outcomes
    assert outcome.fact() == {
        "action": "add-note",
        "status": "invalid",
        "code": "stale",
        "field": "text",
        "hint": "refusal 3",
    }
    assert [s.issue for s in human.seen] == [
        None,
        Issue(code="stale", field="text", hint="refusal 1"),
        Issue(code="stale", field="text", hint="refusal 2"),
    ]
    assert domain.ran == []


async def test_a_valid_edit_after_a_refused_accept_runs_edited() -> None:
    class OnceStale(Notes):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def validate(self, action: str, payload: Any) -> Any:
            self.calls += 1
            if self.calls == 2:
                return {"ok": False, "code": "stale", "hint": "Pick another text."}
            return super().validate(action, payload)

    human = scripted_human(["accept", Edit({"text": "tea"})])
    domain = OnceStale()
    conversation, _, _ = make([envelope(suggest("add-note", '{"text":"x"}')), "ok"], human, domain=domain)
    (outcome,) = (await conversation.say("go")).outcomes
    assert (outcome.status, outcome.edited, outcome.preview) == ("done", True, "Add the note 'tea'")
    assert domain.ran == [("add-note", {"text": "tea"})]


# --------------------------------------------------------------------------------------------- 4.6 outcomes


def test_the_six_statuses_and_which_need_a_reply() -> None:
    """reference (§5.35, §5.36): no 'undone' status, 'handed-off' is one; the same here."""
    assert (
        set(OUTCOME_STATUS.values())
        == set(STATUSES)
        == {"done", "failed", "invalid", "dismissed", "superseded", "handed-off"}
    )
    assert set(NEEDS_REPLY) == {"done", "failed", "invalid"}
    with pytest.raises(ValueError, match=r"^outcome_reply: unknown status 'undone'$"):
        outcome_reply([Outcome(id="sg-1", action="a", status="undone")])


# ------------------------------------------------------------------------------------------ 4.8 carry-over


@pytest.mark.parametrize(
    ("element", "human", "status"),
    [
        (suggest("add-note", '{"text":"x"}'), lambda: policy_human("dismiss"), "dismissed"),
        (suggest("open-poll", "{}"), lambda: scripted_human([]), "handed-off"),
    ],
    ids=["dismissed", "handed-off"],
)
async def test_outcomes_that_wait_go_with_the_next_say_once(element: str, human: Any, status: str) -> None:
    conversation, agent, _ = make([envelope(element), "ok", "fine"], human(), domain=Notes(context=CONTEXT))
    first = await conversation.say("go")
    assert (first.status, first.turns, statuses(first.outcomes)) == ("idle", 1, [("sg-1", status)])
    assert conversation.owed == first.outcomes
    second = await conversation.say("")
    assert (second.status, second.turns, second.outcomes) == ("idle", 1, ())
    assert agent.sent[1] == outcome_reply(first.outcomes) + f"\n\n{CONTEXT}"
    await conversation.say("again")
    assert agent.sent[2] == f"{CONTEXT}\n\nagain"


EXCEPTIONS = [
    # (case, reply elements, domain, human, error, owed)
    (
        "validate raises",
        [suggest("list-notes", "{}"), suggest("add-note", '{"text":"a"}'), suggest("add-note", '{"text":"b"}')],
        lambda: Trips("validate", 2),
        lambda: policy_human(),
        RuntimeError,
        [("sg-1", "done"), ("sg-2", "superseded"), ("sg-3", "superseded")],
    ),
    (
        "answer raises",
        [suggest("list-notes", "{}"), "<dial-ask>Name?</dial-ask>", suggest("add-note", '{"text":"a"}')],
        lambda: Trips(),
        lambda: scripted_human(["not an answer"]),
        TypeError,
        [("sg-1", "done"), ("sg-2", "superseded")],
    ),
    (
        "context raises on the next turn",
        [suggest("list-notes", "{}")],
        lambda: Trips("context", 2),
        lambda: policy_human(),
        RuntimeError,
        [("sg-1", "done")],
    ),
]


@pytest.mark.parametrize(
    ("elements", "domain", "human", "error", "owed"),
    [case[1:] for case in EXCEPTIONS],
    ids=[case[0] for case in EXCEPTIONS],
)
async def test_a_callback_exception_propagates_and_every_outcome_stays_owed(
    elements: list[str], domain: Any, human: Any, error: type[Exception], owed: list[tuple[str, str]]
) -> None:
    """reference: the outcomes of the turn where a callback threw are never reported (§5.29); here: they, and
    the rest of the reply as superseded, go with the next say, because every suggestion gets one outcome."""
    conversation, agent, _ = make([envelope(*elements), "ok"], human(), domain=domain())
    with pytest.raises(error):
        await conversation.say("go")
    assert statuses(conversation.owed) == owed
    logged = [entry.event for entry in conversation.log]
    assert [e.type for e in logged[-2:]] == ["interrupted", "finished"] and logged[-1].status == "interrupted"
    kept = conversation.owed
    result = await conversation.say("again")
    assert (result.status, result.outcomes) == ("idle", ())
    assert agent.sent[-1] == outcome_reply(kept) + "\n\nagain"


async def test_a_say_decision_before_an_exception_is_owed_and_does_not_go_stale() -> None:
    """reference: pendingText stays set after a throw and supersedes the next reply (§5.29); here: the words
    are owed and go with the next say, whose suggestions are decided as usual."""
    first = envelope(suggest("add-note", '{"text":"a"}'), suggest("list-notes", "{}"))
    second = envelope(suggest("add-note", '{"text":"c"}'))
    human = scripted_human([{"say": "instead"}, "accept"])
    conversation, agent, _ = make([first, second, "ok"], human, domain=Trips("validate", 2))
    with pytest.raises(RuntimeError, match="validate broke"):
        await conversation.say("go")
    kept = conversation.owed
    assert statuses(kept) == [("sg-1", "superseded"), ("sg-2", "superseded")]
    result = await conversation.say("again")
    assert statuses(result.outcomes) == [("sg-3", "done")]
    assert agent.sent[1] == outcome_reply(kept) + "\n\ninstead\n\nagain"


async def test_an_action_running_when_the_turn_stops_fails_as_interrupted() -> None:
    class Stuck(Notes):
        async def run(self, action: str, payload: Any) -> Any:
            await anyio.sleep_forever()

    reply = envelope(suggest("add-note", '{"text":"x"}'), suggest("list-notes", "{}"))
    conversation, agent, _ = make([reply, "ok"], domain=Stuck())
    with anyio.move_on_after(0.02):
        await conversation.say("go")
    kept = conversation.owed
    assert statuses(kept) == [("sg-1", "failed"), ("sg-2", "superseded")]
    assert (kept[0].code, kept[0].hint) == (
        "interrupted",
        "The turn stopped while the action ran; its effect is unknown.",
    )
    assert kept[0].preview == "Add the note 'x'"
    await conversation.say("again")
    assert agent.sent[-1] == outcome_reply(kept) + "\n\nagain"


# ------------------------------------------------------------------------------------ 4.9 events and order


async def test_event_order_and_fields_within_turns() -> None:
    reply = envelope(
        "<dial-inform>Looking.</dial-inform>",
        "<dial-ask>Name?</dial-ask>",
        suggest("list-notes", "{}"),
        "<dial-acknowledge>Got it.</dial-acknowledge>",
        '<dial-declare context-key="k">1</dial-declare>',
        suggest("add-note", '{"text":"x"}'),
        '<dial-phatic signal="typing"/>',
        prose="Hi.",
    )
    conversation, agent, events = make([reply, "ok", "again"])
    result = await conversation.say("go")
    assert types(events) == [
        "sent",
        "reply",
        "inform",
        "inform",
        "ask",
        "suggestion",
        "outcome",
        "inform",
        "declare",
        "suggestion",
        "outcome",
        "phatic",
        "sent",
        "reply",
        "inform",
    ]
    assert [(e.text, e.act) for e in events if e.type == "inform"] == [
        ("Hi.", None),
        ("Looking.", "inform"),
        ("Got it.", "acknowledge"),
        ("ok", None),
    ]
    assert [(e.turn, e.message) for e in events if e.type == "sent"] == list(enumerate(agent.sent, 1))
    assert [(e.turn, e.text) for e in events if e.type == "reply"] == [(1, reply), (2, "ok")]
    assert [e.id for e in events if e.type in ("suggestion", "outcome")] == ["sg-1", "sg-1", "sg-2", "sg-2"]
    assert [e.outcome for e in events if e.type == "outcome"] == list(result.outcomes)
    await conversation.say("more")
    assert [e.turn for e in events if e.type == "sent"] == [1, 2, 1]
    assert set(types(events)) <= RENDERED
    logged = {entry.event.type for entry in conversation.log}
    assert {"said", "proposed", "answered", "decided", "finished"} <= logged - set(types(events))


# --------------------------------------------------------------------------------------------- 4.10 humans


async def test_policy_human_defaults_message_and_what_it_saw() -> None:
    with pytest.raises(ValueError, match=r"^policy_human: 'x' is not accept or dismiss$"):
        policy_human("x")
    assert policy_human("dismiss").decide(Suggestion(id="sg-1", action="a")) == Dismiss()
    human = policy_human()
    reply = envelope("<dial-ask>A?</dial-ask>", suggest("add-note", '{"text":"x"}'), "<dial-ask>B?</dial-ask>")
    conversation, agent, _ = make([reply, "ok"], human)
    result = await conversation.say("go")
    assert [type(seen).__name__ for seen in human.seen] == ["Ask", "Suggestion", "Ask"]
    assert statuses(result.outcomes) == [("sg-1", "done")]
    assert agent.sent[1] == outcome_reply(result.outcomes)


def test_scripted_human_works_on_a_copy_and_uses_up_refused_steps() -> None:
    steps: list[Any] = [Accept(), {"answer": None}, "wrong", {"answer": "later"}, {"answer": "x"}]
    human = scripted_human(steps)
    steps.clear()
    suggestion, ask = Suggestion(id="sg-1", action="a"), Ask(id="ask-1")
    assert human.decide(suggestion) == Accept()
    assert human.answer(ask) is None
    with pytest.raises(TypeError, match=r"^scripted_human: expected \{'answer': \.\.\.\}, got 'wrong'$"):
        human.answer(ask)
    assert human.answer(ask) == "later"
    with pytest.raises(TypeError, match=r"^scripted_human: expected a decision, got \{'answer': 'x'\}$"):
        human.decide(suggestion)
    with pytest.raises(LookupError, match=r"^scripted_human: no scripted step left for this decision$"):
        human.decide(suggestion)
    with pytest.raises(LookupError, match=r"^scripted_human: no scripted step left for this ask$"):
        human.answer(ask)
    assert human.seen == [suggestion, ask, ask, ask, suggestion, suggestion, ask]
