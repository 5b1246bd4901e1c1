"""Rules for whether to ask, tried against what people really decided: the verdict of a list of rules (the first
with an opinion decides; one that raises or answers no verdict means ask), the decision points a log holds (with
the facts and the principal as they stood), and ``dial-runtime eval rules`` over a real store, nothing run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dial_runtime import Conversation, scripted_human
from dial_runtime.decisions.rules import Deny, Rule, RuleVerdict, first_verdict, try_rules
from dial_runtime.stores import StorePort, open_store
from dial_runtime.views.points import DecisionPoint, decision_points

from ..fakes import Agent, envelope, suggest
from .test_inbox import ACK, Clock, Desk, waiting_on

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_clocks: str) -> str:
    return real_clocks


def point(action: str = "refund", **payload: Any) -> DecisionPoint:
    return DecisionPoint(conversation="c", id="sg-1", action=action, payload=payload or {"amount": 5})


def small(point: DecisionPoint) -> Any:
    return "approve" if point.payload["amount"] <= 50 else None


RULES = [
    Rule(name="small-refunds", version="2", action="refund", decide=small),
    Rule(name="no-purges", version="1", action="purge", decide=lambda point: Deny("purges wait for Monday")),
    Rule(
        name="huge",
        version="1",
        action="refund",
        decide=lambda point: "ask" if point.payload["amount"] > 900 else None,
    ),
    Rule(name="broken", version="3", action="transfer", decide=lambda point: point.payload["missing"]),
    Rule(name="confused", version="1", action="export", decide=lambda point: "yes"),
    Rule(name="blank", version="1", action="wipe", decide=lambda point: Deny("  ")),
]

#: A point, and what the rules say of it.
VERDICTS = [
    (point(amount=5), RuleVerdict(kind="approve", rule="small-refunds@2")),
    (point(amount=950), RuleVerdict(kind="ask", rule="huge@1")),
    (point(amount=100), RuleVerdict(kind="ask")),  # no rule has an opinion
    (point("purge", table="t"), RuleVerdict(kind="deny", rule="no-purges@1", reason="purges wait for Monday")),
    (point("add-note", text="n"), RuleVerdict(kind="ask")),  # no rule for the action
    (
        point("transfer", amount=1),
        RuleVerdict(kind="ask", rule="broken@3", error="it raised KeyError: 'missing'"),
    ),
    (
        point("export", what="all"),
        RuleVerdict(
            kind="ask", rule="confused@1", error="it answered 'yes', not 'approve', Deny(reason), 'ask' or None"
        ),
    ),
    (
        point("wipe", what="all"),
        RuleVerdict(
            kind="ask",
            rule="blank@1",
            error="it answered Deny(reason='  '), not 'approve', Deny(reason), 'ask' or None",
        ),
    ),
]


@pytest.mark.parametrize(
    ("asked", "verdict"), VERDICTS, ids=[f"{p.action}-{n}" for n, (p, _) in enumerate(VERDICTS)]
)
def test_the_first_rule_with_an_opinion_decides_and_anything_else_means_ask(
    asked: DecisionPoint, verdict: RuleVerdict
) -> None:
    assert first_verdict(RULES, asked) == verdict


async def decide_each_way(store: StorePort) -> Clock:
    """Conversations of ``store`` whose cards people accepted, dismissed, edited, let expire, set aside, or leave
    waiting; one declares a fact before its proposal."""
    clock = Clock()
    accepted = await waiting_on(store, "accepted", envelope(suggest("refund", '{"amount": 5, "to": "bo"}')), clock)
    await accepted.decide("sg-1", {"accept": True}, by="ana", roles=["finance"])
    await accepted.decide("sg-1", {"accept": True}, by="cy", roles=["finance"])
    dismissed = await waiting_on(
        store, "dismissed", envelope(suggest("refund", '{"amount": 7, "to": "bo"}')), clock
    )
    await dismissed.decide("sg-1", {"dismiss": True}, by="ana", roles=["finance"])
    purge = envelope(
        '<dial-declare context-key="weekday">"saturday"</dial-declare>', suggest("purge", '{"table": "t"}')
    )
    purged = await waiting_on(store, "purged", purge, clock, by="olga")
    await purged.decide("sg-1", {"accept": True}, by="olga")
    edited = await waiting_on(store, "edited", envelope(suggest("add-note", '{"text": "n"}')), clock)
    await edited.decide("sg-1", {"edit": {"text": "m"}}, by="bo")
    await waiting_on(store, "expired", envelope(suggest("purge", '{"table": "u"}')), clock)
    aside = await waiting_on(store, "aside", envelope(suggest("add-note", '{"text": "x"}')), clock)
    await aside.say("no, something else", by="bo")
    await waiting_on(store, "waiting", envelope(suggest("refund", '{"amount": 9, "to": "bo"}')), clock)
    clock.now += 601  # the purge of "expired" has ten minutes
    expiring = await Conversation.open(
        store, "expired", agent=Agent([ACK] * 2), domain=Desk(), human=scripted_human([]), clock=clock
    )
    await expiring.expire_due()
    return clock


async def test_a_log_holds_a_decision_point_for_each_card_a_person_was_asked_to_decide(store: StorePort) -> None:
    await decide_each_way(store)
    found = {
        conversation: decision_points(conversation, await store.read(conversation))
        for conversation in await store.conversations()
    }
    decided = {
        conversation: [(p.id, p.decided, p.decided_by) for p in points] for conversation, points in found.items()
    }
    assert decided == {
        "accepted": [("sg-1", "accepted", "cy")],
        "dismissed": [("sg-1", "dismissed", "ana")],
        "purged": [("sg-1", "accepted", "olga")],
        "edited": [("sg-1", "edited", "bo")],
        "expired": [("sg-1", "expired", None)],
        "aside": [("sg-1", "set-aside", None)],  # words said over it: no decision, nobody named
        "waiting": [("sg-1", "waiting", None)],
    }
    (purge,) = found["purged"]
    assert (purge.action, purge.payload, purge.preview) == ("purge", {"table": "t"}, "Purge t")
    assert (purge.principal, purge.facts) == ("olga", {"weekday": "saturday"})  # as they stood when it was shown


def test_a_rules_report_names_what_would_have_gone_another_way() -> None:
    points = [
        DecisionPoint(conversation="a", id="sg-1", action="refund", payload={"amount": 5}, decided="dismissed"),
        DecisionPoint(conversation="b", id="sg-1", action="refund", payload={"amount": 6}, decided="accepted"),
        DecisionPoint(conversation="c", id="sg-1", action="refund", payload={"amount": 7}, decided="edited"),
        DecisionPoint(conversation="d", id="sg-1", action="purge", payload={}, decided="accepted"),
        DecisionPoint(conversation="e", id="sg-1", action="purge", payload={}, decided="dismissed"),
        DecisionPoint(conversation="f", id="sg-1", action="transfer", payload={}, decided="accepted"),
    ]
    report = try_rules(RULES, points)
    assert report.summary() == {
        "points": 6,
        "approved": 3,
        "approved_yet_dismissed": 1,
        "approved_yet_edited": 1,
        "denied": 2,
        "denied_yet_accepted": 1,
        "asked": 1,
        "errors": 1,
    }
    assert [each.point.conversation for each in report.approved_yet_dismissed] == ["a"]
    assert [each.point.conversation for each in report.denied_yet_accepted] == ["d"]


RULES_FILE = """
from dial_runtime.decisions.rules import Deny, Rule


def weekend(point):
    if point.facts.get("weekday") in ("saturday", "sunday"):
        return Deny("purges wait for Monday")
    return None


def small(point):
    return "approve" if point.payload["amount"] < 8 else None


RULES = [
    Rule(name="small-refunds", version="2", action="refund", decide=small),
    Rule(name="weekend-purges", version="1", action="purge", decide=weekend),
    Rule(name="notes", version="1", action="add-note", decide=lambda point: point.payload["nope"]),
]
"""


def eval_rules(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "eval", "rules", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_command_tries_rules_at_every_recorded_decision_and_runs_nothing(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'desk.db'}"
    store = open_store(url)
    try:
        await decide_each_way(store)
        before = {conversation: await store.read(conversation) for conversation in await store.conversations()}
    finally:
        await store.aclose()
    rules = tmp_path / "rules.py"
    rules.write_text(RULES_FILE, encoding="utf-8")
    report = tmp_path / "report.json"
    tried = eval_rules("--store", url, "--rules", str(rules), "--json", str(report))
    assert tried.returncode == 0, tried.stderr
    assert tried.stdout.splitlines() == [
        "tried 3 rule(s) at 7 decision point(s) of 7 conversation(s)",
        "would have approved 2 automatically, of which people had dismissed 1 and run 0 only after an edit",
        "  dismissed sg-1  Refund 7 to bo  (small-refunds@2; dismissed by ana)",
        "would have denied 1, of which people had accepted 1",
        "  purged sg-1  Purge t  (weekend-purges@1: 'purges wait for Monday'; accepted by olga)",
        "would have asked 4",
        "rules whose answer could not be used (asked instead): 2",
        "  aside sg-1  Add the note 'x'  (notes@1: it raised KeyError: 'nope'; set-aside)",
        "  edited sg-1  Add the note 'n'  (notes@1: it raised KeyError: 'nope'; edited by bo)",
    ]
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["summary"]["denied_yet_accepted"] == 1 and len(written["tried"]) == 7
    store = open_store(url)
    try:  # nothing ran: every log is as it was
        assert {
            conversation: await store.read(conversation) for conversation in await store.conversations()
        } == before
    finally:
        await store.aclose()


BAD_RULES = [
    (None, "--rules {path}: no such file", 1),
    ("RULES = [\n  Rule(\n", "--rules {path}:2: '(' was never closed", 1),
    ("raise RuntimeError('no config')\n", "--rules {path}: running it raised RuntimeError: no config", 1),
    ("RULE = []\n", "--rules {path}: declare RULES, a list of dial_runtime.decisions.rules.Rule", 1),
    (
        "RULES = ['approve']\n",
        "--rules {path}: 'approve' is no rule; declare dial_runtime.decisions.rules.Rule",
        1,
    ),
    ("RULES = 'approve'\n", "--rules {path}: declare RULES, a list of dial_runtime.decisions.rules.Rule", 1),
    (
        "from dial_runtime.decisions.rules import Rule\nRULES = [Rule(name='a', version='1', decide=print)] * 2\n",
        "--rules {path}: rule a@1 is declared twice",
        1,
    ),
    (
        "from dial_runtime.decisions.rules import Rule\nRULES = [Rule(name='a', version='1', decide='approve')]\n",
        "--rules {path}: rule a@1: decide is not a function",
        1,
    ),
]


@pytest.mark.parametrize(("source", "error", "status"), BAD_RULES)
def test_a_rules_file_that_does_not_load_is_refused_in_one_line(
    tmp_path: Path, source: str | None, error: str, status: int
) -> None:
    rules = tmp_path / "rules.py"
    if source is not None:
        rules.write_text(textwrap.dedent(source), encoding="utf-8")
    refused = eval_rules("--store", f"sqlite:{tmp_path / 'desk.db'}", "--rules", str(rules))
    assert refused.returncode == status
    assert refused.stderr.strip().splitlines() == [f"dial-runtime eval: {error.format(path=rules)}"]
    assert refused.stdout == ""


ANSWERS = st.one_of(
    st.none(),
    st.sampled_from(["approve", "ask", "deny", "APPROVE"]),
    st.text(max_size=10),
    st.integers(),
    st.builds(Deny, st.text(max_size=20)),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@given(answer=ANSWERS)
def test_whatever_a_rule_answers_the_verdict_is_approve_deny_or_ask(answer: Any) -> None:
    verdict = first_verdict([Rule(name="any", version="1", decide=lambda point: answer)], point())
    if answer is None:
        assert verdict == RuleVerdict(kind="ask")
    elif answer in ("approve", "ask"):
        assert verdict == RuleVerdict(kind=answer, rule="any@1")
    elif isinstance(answer, Deny) and answer.reason.strip():
        assert verdict == RuleVerdict(kind="deny", rule="any@1", reason=answer.reason)
    else:
        assert verdict.kind == "ask" and verdict.rule == "any@1" and verdict.error is not None
        assert "\n" not in verdict.error  # one line, whatever the answer
