"""Who may decide: an action's approval policy (``ApprovalPolicy``) says how many distinct people must approve
it, holding which roles, whether the person who asked for it may be its only approver, and whether one
dismissal ends it. Every approval, refusal and wait is an event; the action runs once, when the policy is met;
the fold refuses a log that runs it sooner. The same rules hold for every caller of ``decide``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest

from dial_runtime import (
    Accept,
    ActionSpec,
    ApprovalPolicy,
    Conversation,
    Dismiss,
    Domain,
    Edit,
    Say,
    project,
    replay,
    scripted_human,
)
from dial_runtime.errors import LinkRefused, LogError
from dial_runtime.runtime.events import (
    ActionStartedEvent,
    ApprovalRefusedEvent,
    ApprovalWaitingEvent,
    DecidedEvent,
    LogEntry,
    OutcomeEvent,
    ResumedEvent,
)
from dial_runtime.stores import MemoryStore
from dial_runtime.stores.jsonl import check_log
from dial_runtime.terminal.transcript import Transcript, approvals_words

from ..fakes import Agent, envelope, suggest

DROP = envelope(suggest("drop-table", '{"table": "users"}'))
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")


class Database:
    """A domain with one destructive action whose policy the test sets."""

    actions: ClassVar[dict[str, Any]] = {}

    def __init__(self, policy: ApprovalPolicy) -> None:
        self.actions = {"drop-table": ActionSpec(mutates=True, destructive=True, policy=policy)}
        self.ran: list[Any] = []

    def run(self, action: str, payload: Any) -> Any:
        self.ran.append(payload)
        return {"dropped": payload["table"]}


async def waiting(policy: ApprovalPolicy, *, asker: str = "ada") -> tuple[Conversation, Database]:
    domain = Database(policy)
    conversation = await Conversation.open(
        MemoryStore(), "c-1", agent=Agent([DROP, ACK, ACK]), domain=domain, human=scripted_human(["defer"])
    )
    assert (await conversation.say("drop the users table", by=asker)).status == "awaiting"
    return conversation, domain


def events(conversation: Conversation, kind: type[Any]) -> list[Any]:
    return [entry.event for entry in conversation.log if isinstance(entry.event, kind)]


@pytest.mark.anyio
async def test_two_approvers_are_needed_and_the_action_runs_once_when_both_approved() -> None:
    conversation, domain = await waiting(ApprovalPolicy(approvals=2))
    first = await conversation.decide("sg-1", Accept(), by="bob")
    assert first.status == "awaiting" and domain.ran == []
    card = project(conversation.log).card("sg-1")
    assert card is not None and (card.approvals_needed, card.approvers) == (2, ("bob",))
    assert [(w.approvers, w.needed) for w in events(conversation, ApprovalWaitingEvent)] == [(("bob",), 2)]
    second = await conversation.decide("sg-1", Accept(), by="cy")
    assert [o.status for o in second.outcomes] == ["done"]
    assert domain.ran == [{"table": "users"}]
    assert len(events(conversation, ActionStartedEvent)) == 1
    card = project(conversation.log).card("sg-1")
    assert card is not None and card.approvers == ("bob", "cy") and card.status == "done"
    check_log(list(conversation.log))


REFUSALS: list[tuple[str, ApprovalPolicy, list[dict[str, Any]], str]] = [
    ("nobody named", ApprovalPolicy(approvals=2), [{}], "unknown-decider"),
    ("the same person twice", ApprovalPolicy(approvals=2), [{"by": "bob"}, {"by": "bob"}], "already-approved"),
    (
        "without the role",
        ApprovalPolicy(roles=frozenset({"dba"})),
        [{"by": "bob", "roles": ("dev",)}],
        "not-a-decider",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "policy", "decisions", "code"), REFUSALS, ids=[case[0] for case in REFUSALS])
async def test_an_approval_the_policy_does_not_take_is_refused_and_changes_nothing(
    name: str, policy: ApprovalPolicy, decisions: list[dict[str, Any]], code: str
) -> None:
    conversation, domain = await waiting(policy)
    for options in decisions:
        result = await conversation.decide("sg-1", Accept(), **options)
        assert result.status == "awaiting"
    (refused,) = events(conversation, ApprovalRefusedEvent)
    assert refused.code == code and refused.hint
    assert domain.ran == [] and [s.id for s in conversation.pending] == ["sg-1"]
    card = project(conversation.log).card("sg-1")
    assert card is not None and card.approval_refused == refused.hint


@pytest.mark.anyio
async def test_a_role_holder_approves_and_the_role_is_on_the_log() -> None:
    conversation, domain = await waiting(ApprovalPolicy(roles=frozenset({"dba"})))
    await conversation.decide("sg-1", Accept(), by="bob", roles=["dev", "dba"])
    assert domain.ran == [{"table": "users"}]
    (accept,) = [d for d in events(conversation, DecidedEvent) if d.decision == "accept"]
    assert (accept.by, accept.roles) == ("bob", ("dba", "dev"))


@pytest.mark.anyio
async def test_the_person_who_asked_is_never_the_only_approver() -> None:
    conversation, domain = await waiting(ApprovalPolicy(separation=True), asker="ada")
    assert (await conversation.decide("sg-1", Accept(), by="ada")).status == "awaiting"
    assert domain.ran == []
    await conversation.decide("sg-1", Accept(), by="bob")
    assert domain.ran == [{"table": "users"}]


@pytest.mark.anyio
@pytest.mark.parametrize("ends", [True, False])
async def test_one_dismissal_ends_it_unless_the_policy_says_otherwise(ends: bool) -> None:
    conversation, domain = await waiting(ApprovalPolicy(approvals=2, dismissal_ends=ends))
    result = await conversation.decide("sg-1", Dismiss(), by="bob")
    if ends:
        assert [o.status for o in result.outcomes] == ["dismissed"]
        return
    assert result.status == "awaiting" and [s.id for s in conversation.pending] == ["sg-1"]
    await conversation.decide("sg-1", Accept(), by="cy")
    await conversation.decide("sg-1", Accept(), by="dee")
    assert domain.ran == [{"table": "users"}]


@pytest.mark.anyio
async def test_an_edit_voids_the_approvals_of_the_payload_before_it() -> None:
    conversation, domain = await waiting(ApprovalPolicy(approvals=2))
    await conversation.decide("sg-1", Accept(), by="bob")
    await conversation.decide("sg-1", Edit({"table": "sessions"}), by="cy")  # cy approves the new payload alone
    assert domain.ran == []
    card = project(conversation.log).card("sg-1")
    assert card is not None and card.approvers == ("cy",)
    await conversation.decide("sg-1", Accept(), by="bob")  # bob approves again, the payload he now sees
    assert domain.ran == [{"table": "sessions"}]


@pytest.mark.anyio
async def test_the_fold_refuses_a_log_that_runs_an_action_before_its_policy_is_met() -> None:
    conversation, _ = await waiting(ApprovalPolicy(approvals=2))
    await conversation.decide("sg-1", Accept(), by="bob")
    log = list(conversation.log)
    waited = next(n for n, entry in enumerate(log) if isinstance(entry.event, ApprovalWaitingEvent))
    forged = [
        *log[:waited],
        *(
            LogEntry(seq=waited + offset + 1, time=log[waited].time, event=event)
            for offset, event in enumerate(
                [
                    ActionStartedEvent(
                        suggestion_id="sg-1", action="drop-table", payload={"table": "users"}, preview=""
                    ),
                ]
            )
        ),
    ]
    with pytest.raises(LogError):
        check_log(forged)
    twice = [
        *log,
        LogEntry(
            seq=len(log) + 1,
            time=log[-1].time,
            event=DecidedEvent(suggestion_id="sg-1", decision="accept", by="bob"),
        ),
    ]
    with pytest.raises(LogError):
        check_log(twice)


@pytest.mark.anyio
async def test_a_log_with_approvals_replays_without_a_difference() -> None:
    conversation, _ = await waiting(ApprovalPolicy(approvals=2))
    await conversation.decide("sg-1", Accept(), by="bob")
    await conversation.decide("sg-1", Accept(), by="bob")  # refused: already approved
    await conversation.decide("sg-1", Accept(), by="cy")
    assert [o.status for o in events(conversation, OutcomeEvent)] == ["done"]
    assert replay(conversation.log, conversation_id="c-1").divergences == ()


def test_a_typed_action_declares_its_policy() -> None:
    ops = Domain("ops")

    @ops.action(destructive=True, policy=ApprovalPolicy(approvals=2, separation=True))
    def drop_table(table: str) -> None:
        """Drop a table."""

    assert ops.actions["drop-table"].policy == ApprovalPolicy(approvals=2, separation=True)
    with pytest.raises(ValueError, match="at least 1"):
        ApprovalPolicy(approvals=0)


@pytest.mark.anyio
async def test_the_terminal_and_the_transcript_say_where_the_policy_stands() -> None:
    conversation, _ = await waiting(ApprovalPolicy(approvals=2))
    lines: list[str] = []
    transcript = Transcript(lines.append)
    for item in project(conversation.log).items:
        transcript.render(item)
    assert any("agent proposes sg-1" in line and "0 of 2 approvals" in line for line in lines), lines
    await conversation.decide("sg-1", Accept(), by="bob")
    card = project(conversation.log).card("sg-1")
    assert card is not None and approvals_words(card) == "1 of 2 approvals: bob"
    assert approvals_words(msgspec.structs.replace(card, escalated_to=("cto",))) == (
        "1 of 2 approvals: bob, escalated to cto"
    )
    assert approvals_words(msgspec.structs.replace(card, approvals_needed=0)) is None


#: Every way to end a card, and who tries: a card the policy reserves for ``ops`` ends only by a named holder of
#: ``ops``, through every means; anyone else's attempt is refused and logged, and the card waits on.
ENDINGS: dict[str, Any] = {
    "accept": lambda conversation, who: conversation.decide("sg-1", Accept(), **who),
    "edit": lambda conversation, who: conversation.decide("sg-1", Edit({"table": "sessions"}), **who),
    "dismiss": lambda conversation, who: conversation.decide("sg-1", Dismiss(), **who),
    "say instead": lambda conversation, who: conversation.decide("sg-1", Say("never mind"), **who),
    "new words": lambda conversation, who: conversation.say("never mind", **who),
}
OUTSIDERS: dict[str, tuple[dict[str, Any], str]] = {
    "nobody named": ({}, "unknown-decider"),
    "eve without roles": ({"by": "eve"}, "not-a-decider"),
    "eve with another role": ({"by": "eve", "roles": ["dev"]}, "not-a-decider"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("means", list(ENDINGS))
@pytest.mark.parametrize("outsider", list(OUTSIDERS))
async def test_only_a_decider_the_policy_admits_ends_a_card_by_any_means(means: str, outsider: str) -> None:
    who, code = OUTSIDERS[outsider]
    conversation, domain = await waiting(ApprovalPolicy(roles=frozenset({"ops"})))
    before = [entry.event.type for entry in conversation.log]
    result = await ENDINGS[means](conversation, who)
    assert result.status == "awaiting" and result.outcomes == ()
    assert [s.id for s in conversation.pending] == ["sg-1"] and domain.ran == []
    (refused,) = events(conversation, ApprovalRefusedEvent)
    assert (refused.suggestion_id, refused.code, refused.by) == ("sg-1", code, who.get("by"))
    added = [entry.event.type for entry in conversation.log][len(before) :]
    assert "decided" not in added and "said" not in added and "outcome" not in added
    card = project(conversation.log).card("sg-1")
    assert card is not None and card.waiting and card.approval_refused == refused.hint
    check_log(list(conversation.log))
    assert replay(conversation.log, conversation_id="c-1").divergences == ()
    # The one the policy admits ends it, by the same means.
    ended = await ENDINGS[means](conversation, {"by": "olga", "roles": ["ops"]})
    assert "sg-1" not in [s.id for s in conversation.pending], ended


@pytest.mark.anyio
@pytest.mark.parametrize("decision", ["dismiss", "say"])
async def test_the_fold_refuses_a_log_where_an_outsider_ended_a_reserved_card(decision: str) -> None:
    conversation, _ = await waiting(ApprovalPolicy(roles=frozenset({"ops"})))
    await conversation.decide("sg-1", Dismiss(), by="olga", roles=["ops"])
    log = list(conversation.log)
    at = next(n for n, entry in enumerate(log) if isinstance(entry.event, DecidedEvent))
    check_log(log)
    forged_event = msgspec.structs.replace(log[at].event, decision=decision, by="eve", roles=())
    forged = [*log[:at], msgspec.structs.replace(log[at], event=forged_event), *log[at + 1 :]]
    with pytest.raises(LogError, match="may not be ended"):
        check_log(forged)


@pytest.mark.anyio
async def test_the_fold_refuses_a_log_where_an_outsiders_words_superseded_a_reserved_card() -> None:
    conversation, _ = await waiting(ApprovalPolicy(roles=frozenset({"ops"})))
    await conversation.say("never mind", by="olga", roles=["ops"])
    log = list(conversation.log)
    at = next(n for n, entry in enumerate(log) if isinstance(entry.event, ResumedEvent))
    assert log[at].event == ResumedEvent(call="say", by="olga", roles=("ops",))
    check_log(log)
    forged = [
        *log[:at],
        msgspec.structs.replace(log[at], event=ResumedEvent(call="say", by="eve")),
        *log[at + 1 :],
    ]
    with pytest.raises(LogError, match="may not be superseded"):
        check_log(forged)


@pytest.mark.anyio
async def test_a_vote_against_needs_the_role_too() -> None:
    conversation, _ = await waiting(ApprovalPolicy(approvals=2, roles=frozenset({"ops"}), dismissal_ends=False))
    await conversation.decide("sg-1", Dismiss(), by="eve")
    (refused,) = events(conversation, ApprovalRefusedEvent)
    assert refused.code == "not-a-decider" and not events(conversation, DecidedEvent)
    await conversation.decide("sg-1", Dismiss(), by="olga", roles=["ops"])
    assert [(d.decision, d.by) for d in events(conversation, DecidedEvent)] == [("dismiss", "olga")]
    assert [s.id for s in conversation.pending] == ["sg-1"]


@pytest.mark.anyio
async def test_a_link_decides_a_card_once() -> None:
    conversation, _ = await waiting(ApprovalPolicy(approvals=3, roles=frozenset({"ops"})))
    await conversation.decide("sg-1", Accept(), by="olga", roles=["ops"], link="jti-1")
    with pytest.raises(LinkRefused) as refused:
        await conversation.decide("sg-1", Accept(), by="oscar", roles=["ops"], link="jti-1")
    assert refused.value.reason == "replayed"
    assert [(d.by, d.link) for d in events(conversation, DecidedEvent)] == [("olga", "jti-1")]
    log = list(conversation.log)
    again = DecidedEvent(suggestion_id="sg-1", decision="accept", by="oscar", roles=("ops",), link="jti-1")
    with pytest.raises(LogError, match="single-use link"):
        check_log(
            [
                *log,
                LogEntry(seq=len(log) + 1, time=log[-1].time, event=ResumedEvent(call="decide")),
                LogEntry(seq=len(log) + 2, time=log[-1].time, event=again),
            ]
        )
