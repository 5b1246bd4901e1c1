"""Rules for whether to ask, applied to live cards: before a valid suggestion waits for a person, the domain's
``approval_rules`` approve it (it runs, no person asked), deny it (it ends dismissed with the rule's reason, which
the agent is told) or ask; a rule that fails, or none with an opinion, asks. The verdict is on the log, named by
rule and version, shown on the card and in the inbox, answered from the log by replay, and a log whose verdict no
run could have written is refused."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest

from dial_runtime import ActionSpec, ApprovalPolicy, Conversation, Defer, Domain, project, replay
from dial_runtime.decisions.inbox import Inbox
from dial_runtime.decisions.rules import Deny, Rule, RuleVerdict, try_rules
from dial_runtime.errors import LogError
from dial_runtime.runtime.asking import DecisionPoint
from dial_runtime.runtime.events import LogEntry, OutcomeEvent, SuggestionEvent
from dial_runtime.runtime.state import ConversationState, fold_log
from dial_runtime.stores import StorePort
from dial_runtime.views.points import decision_points

from ..fakes import Agent, envelope, suggest
from .test_inbox import ACK, Clock, Desk

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    return real_clocks


def small_refunds(point: DecisionPoint) -> Any:
    return "approve" if point.payload["amount"] <= 50 else None


def weekend_purges(point: DecisionPoint) -> Any:
    return Deny("purges wait for Monday") if point.facts.get("weekday") == "sunday" else None


def interns_ask(point: DecisionPoint) -> Any:
    return "ask" if point.principal == "intern" else "approve"


def broken(point: DecisionPoint) -> Any:
    return point.payload["missing"]


async def async_rule(point: DecisionPoint) -> Any:
    return "approve"


RULES = (
    Rule(name="small-refunds", version="2", action="refund", decide=small_refunds),
    Rule(name="weekend-purges", version="1", action="purge", decide=weekend_purges),
    Rule(name="notes", version="3", action="add-note", decide=interns_ask),
    Rule(name="broken", version="1", action="remove-note", decide=broken),
    Rule(name="async", version="1", action="fail-note", decide=async_rule),
)


class RuledDesk(Desk):
    """The desk with rules for whether to ask; ``tidy`` is an action with no approval policy that the rules
    approve small refunds for, and ``refund`` keeps its policy (two of finance)."""

    actions: ClassVar[dict[str, Any]] = {
        **Desk.actions,
        "tidy-refund": ActionSpec(mutates=True),
    }
    approval_rules = (
        *RULES,
        Rule(name="small-refunds", version="2", action="tidy-refund", decide=small_refunds),
    )

    def preview(self, action: str, payload: Any) -> str:
        if action == "tidy-refund":
            return f"Refund {payload['amount']} to {payload['to']}"
        return super().preview(action, payload)


class Person:
    """A person who defers every decision, and counts the times they were asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def decide(self, suggestion: Any) -> Defer:
        self.asked.append(suggestion.id)
        return Defer()


def said(action: str, payload: str, *, weekday: str | None = None) -> str:
    """An agent's reply proposing ``action`` (after declaring the weekday, when given)."""
    declared = f'<dial-declare context-key="weekday">{weekday}</dial-declare>' if weekday else ""
    return envelope(declared, suggest(action, payload))


#: (case, reply, who speaks, whether the person is asked, the card's status, the rule's verdict on the log, what
#: the card says of it, why a person decides it, the outcome's code)
CASES = [
    (
        "approved",
        said("tidy-refund", '{"amount": 5, "to": "bo"}'),
        "ada",
        False,
        "done",
        RuleVerdict(kind="approve", rule="small-refunds@2"),
        "Approved by rule small-refunds@2",
        "",
        None,
    ),
    (
        "denied",
        said("purge", '{"table": "t"}', weekday="sunday"),
        "ada",
        False,
        "dismissed",
        RuleVerdict(kind="deny", rule="weekend-purges@1", reason="purges wait for Monday"),
        "Denied by rule weekend-purges@1",
        "",
        "denied-by-rule",
    ),
    (
        "asked",
        said("add-note", '{"text": "n"}'),
        "intern",
        True,
        "deferred-waiting",
        RuleVerdict(kind="ask", rule="notes@3"),
        "",
        "rule notes@3 asks a person",
        None,
    ),
    (
        "no-opinion",
        said("tidy-refund", '{"amount": 500, "to": "bo"}'),
        "ada",
        True,
        "deferred-waiting",
        None,
        "",
        "",
        None,
    ),
    (
        "policy-wins",
        said("refund", '{"amount": 5, "to": "bo"}'),
        "ada",
        True,
        "deferred-waiting",
        RuleVerdict(kind="approve", rule="small-refunds@2"),
        "",
        "rule small-refunds@2 would approve it, but its approval policy needs 2 approvals from finance",
        None,
    ),
    (
        "raised",
        said("remove-note", '{"text": "n"}'),
        "ada",
        True,
        "deferred-waiting",
        RuleVerdict(kind="ask", rule="broken@1", error="it raised KeyError: 'missing'"),
        "",
        "rule broken@1 failed (it raised KeyError: 'missing'), so a person decides",
        None,
    ),
    (
        "async",
        said("fail-note", '{"text": "n"}'),
        "ada",
        True,
        "deferred-waiting",
        RuleVerdict(kind="ask", rule="async@1", error="it is async; a rule is a plain function"),
        "",
        "rule async@1 failed (it is async; a rule is a plain function), so a person decides",
        None,
    ),
    (
        "not-for-this-action",
        said("purge", '{"table": "t"}', weekday="monday"),
        "ada",
        True,
        "deferred-waiting",
        None,
        "",
        "",
        None,
    ),
]


@pytest.mark.parametrize(
    ("reply", "speaker", "asked", "status", "verdict", "words", "why", "code"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
async def test_the_first_rule_with_an_opinion_decides_whether_a_person_is_asked(
    store: StorePort,
    reply: str,
    speaker: str,
    asked: bool,
    status: str,
    verdict: RuleVerdict | None,
    words: str,
    why: str,
    code: str | None,
) -> None:
    clock, person, desk = Clock(), Person(), RuledDesk()
    conversation = await Conversation.open(
        store, "r", agent=Agent([reply, ACK]), domain=desk, human=person, clock=clock
    )
    await conversation.say("please", by=speaker)
    logged = await store.read("r")
    (shown,) = [entry.event for entry in logged if isinstance(entry.event, SuggestionEvent)]
    assert shown.ruled == verdict
    assert person.asked == (["sg-1"] if asked else [])
    card = project(logged).card("sg-1")
    assert card is not None
    assert (card.status, card.ruled, card.ruled_words, card.why_asked) == (status, verdict, words, why)
    assert (len(desk.ran) == 1) == (status == "done")
    waiting = await Inbox(store, clock=clock).waiting()
    assert [(each.id, each.why_asked) for each in waiting] == ([("sg-1", why)] if asked else [])
    if code is not None:
        (ended,) = [entry.event for entry in logged if isinstance(entry.event, OutcomeEvent)]
        assert (ended.status, ended.code, ended.hint) == ("dismissed", code, verdict and verdict.reason)
        assert card.outcome == "Denied: purges wait for Monday"
        assert shown.deadline is None  # it never waited: no deadline to show or fire


async def test_the_agent_is_told_a_denial_and_its_reason_with_the_next_words(store: StorePort) -> None:
    agent = Agent([said("purge", '{"table": "t"}', weekday="sunday"), ACK])
    conversation = await Conversation.open(store, "r", agent=agent, domain=RuledDesk(), human=Person())
    assert (await conversation.say("purge it")).status == "idle"
    await conversation.say("fine")
    told = agent.sent[-1]
    assert 'context-key="outcome:sg-1"' in told
    assert '"status":"dismissed"' in told.replace(" ", "")
    assert "purges wait for Monday" in told and "denied-by-rule" in told


async def test_a_typed_domain_declares_its_rules_and_refuses_a_list_that_is_not_rules() -> None:
    notes = Domain("notes", approval_rules=[Rule(name="all", version="1", decide=lambda point: "approve")])

    @notes.action
    def add_note(text: str) -> dict[str, str]:
        return {"added": text}

    agent = Agent([said("add-note", '{"text": "n"}'), ACK])
    conversation = Conversation(agent=agent, domain=notes, human=Person())
    result = await conversation.say("note it")
    assert [(each.status, each.result) for each in result.outcomes] == [("done", {"added": "n"})]
    with pytest.raises(ValueError, match=r"^Domain 'x': 'approve' is no rule; declare"):
        Domain("x", approval_rules=["approve"])  # type: ignore[list-item]
    twice = Rule(name="a", version="1", decide=lambda point: None)
    with pytest.raises(ValueError, match=r"^Domain 'x': rule a@1 is declared twice$"):
        Domain("x", approval_rules=[twice, twice])


async def test_replay_answers_the_rules_from_the_log_and_recheck_asks_them_again(store: StorePort) -> None:
    replies = [said("tidy-refund", '{"amount": 5, "to": "bo"}'), ACK]
    conversation = await Conversation.open(store, "r", agent=Agent(replies), domain=RuledDesk(), human=Person())
    await conversation.say("refund bo")
    recorded = await store.read("r")
    assert replay(recorded).ok  # no domain at all: the log answers for the rules
    assert replay(recorded, domain=RuledDesk(), recheck=True).ok

    class Stricter(RuledDesk):
        approval_rules = (Rule(name="ask-all", version="1", decide=lambda point: "ask"),)

    rechecked = replay(recorded, domain=Stricter(), recheck=True)
    assert not rechecked.ok  # the rules changed since: the replay says the suggestion would have waited


async def test_a_point_a_rule_decided_is_no_person_s_decision_in_eval(store: StorePort) -> None:
    replies = [said("tidy-refund", '{"amount": 5, "to": "bo"}'), ACK]
    conversation = await Conversation.open(store, "r", agent=Agent(replies), domain=RuledDesk(), human=Person())
    await conversation.say("refund bo")
    (point,) = decision_points("r", await store.read("r"))
    assert point.decided == "ruled"
    report = try_rules([Rule(name="never", version="1", decide=lambda point: Deny("no"))], [point])
    assert report.summary()["denied_yet_accepted"] == 0


def _ruled_log(verdict: RuleVerdict, **shown: Any) -> list[LogEntry]:
    """A log whose shown suggestion carries ``verdict`` (and ``shown``'s fields), as no run may have written."""
    from dial_runtime.runtime.core import ConversationCore

    from ..runtime.test_core import World, drive

    core = ConversationCore()
    drive(core.say("go"), World([envelope(suggest("add-note", '{"text": "milk"}')), ACK], [Defer()]))
    entries = list(core.log.entries())
    at = next(index for index, entry in enumerate(entries) if isinstance(entry.event, SuggestionEvent))
    event = msgspec.structs.replace(entries[at].event, ruled=verdict, **shown)
    return [*entries[:at], msgspec.structs.replace(entries[at], event=event), *entries[at + 1 :]]


@pytest.mark.parametrize(
    ("verdict", "shown", "why"),
    [
        (RuleVerdict(kind="approve", rule="a@1"), {"mutates": False}, "runs without asking"),
        (RuleVerdict(kind="approve", rule="a@1"), {"handoff": True}, "runs without asking"),
        (RuleVerdict(kind="approve"), {}, "ruled on by no rule"),
        (RuleVerdict(kind="deny", rule="a@1"), {}, "only a denial, gives its reason"),
        (RuleVerdict(kind="deny", rule="a@1", reason="  "), {}, "only a denial, gives its reason"),
        (RuleVerdict(kind="ask", rule="a@1", reason="why"), {}, "only a denial, gives its reason"),
        (RuleVerdict(kind="approve", rule="a@1", error="it raised"), {}, "a rule that failed asks the person"),
    ],
)
def test_the_fold_refuses_a_rule_s_verdict_no_run_could_have_logged(
    verdict: RuleVerdict, shown: dict[str, Any], why: str
) -> None:
    with pytest.raises(LogError, match=why):
        fold_log(_ruled_log(verdict, **shown))


@pytest.mark.parametrize(
    ("verdict", "policy"),
    [
        (RuleVerdict(kind="ask", rule="a@1"), None),
        (RuleVerdict(kind="ask", rule="a@1", error="it raised KeyError"), None),
        (RuleVerdict(kind="approve", rule="a@1"), ApprovalPolicy(approvals=2)),  # the policy's people decide
    ],
)
def test_the_fold_takes_a_card_a_rule_left_to_a_person_waiting(
    verdict: RuleVerdict, policy: ApprovalPolicy | None
) -> None:
    state = ConversationState()
    fold_log(_ruled_log(verdict, policy=policy), state)
    assert state.open_suggestions["sg-1"].deferred


def test_the_fold_refuses_a_card_a_rule_approved_that_then_waits_for_a_person() -> None:
    with pytest.raises(LogError, match="not waiting for a decision"):
        fold_log(_ruled_log(RuleVerdict(kind="approve", rule="a@1")))
