"""The projection: what a person sees of a conversation, as a pure, incremental function of its log. Built from
real conversations (the scripted agents and people of the runtime's tests), fed whole, in pieces, live or from
a store: always the same."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dial_runtime import (
    Accept,
    Conversation,
    Defer,
    Dismiss,
    Edit,
    LogEntry,
    Projection,
    Say,
    Suggestion,
    open_store,
    project,
    scripted_human,
)
from dial_runtime.runtime.events import SaidEvent, SentEvent
from dial_runtime.runtime.records import payload_digest
from dial_runtime.views.person import (
    AgentText,
    Aside,
    Card,
    Item,
    Notice,
    PersonWords,
    Question,
    RefusedProposal,
    Told,
)

from ..fakes import Agent, Notes, Stall, envelope, hang, make, suggest

pytestmark = pytest.mark.anyio

ADD_MILK = envelope(suggest("add-note", '{"text":"buy milk"}', text="Add milk to your notes"))
THANKS = envelope("<dial-acknowledge>Noted.</dial-acknowledge>")
ASK = envelope('<dial-ask id="ask-1">Which list?</dial-ask>')


class Later:
    """A person who decides and answers later: everything waits (``decide`` and ``answer`` on the conversation)."""

    def decide(self, suggestion: Suggestion) -> Defer:
        return Defer()

    def answer(self, ask: Any) -> Defer:
        return Defer()


class Away:
    """A person who never decides (a deadline ends the wait)."""

    async def decide(self, suggestion: Suggestion) -> Any:
        await anyio.sleep_forever()


def trio_run(build: Callable[[], Awaitable[Conversation]]) -> Conversation:
    """A conversation built outside an async test."""
    import trio

    return trio.run(build)


def of(kind: type[Any], items: tuple[Item, ...]) -> list[Any]:
    """The items of one kind, in order."""
    return [item for item in items if isinstance(item, kind)]


# --- the conversations ------------------------------------------------------------------------------------------
# Each builds a real conversation and returns it; its log is what the projection reads.


async def accepted() -> Conversation:
    conversation, _, _ = make([envelope("<dial-inform>Sure.</dial-inform>", prose="Hello!"), ADD_MILK, THANKS])
    await conversation.say("hi")
    await conversation.say("add a note: buy milk")
    return conversation


async def destructive() -> Conversation:
    conversation, _, _ = make([envelope(suggest("remove-note", '{"text":"x"}')), THANKS])
    await conversation.say("remove x")
    return conversation


async def answered_later() -> Conversation:
    conversation, _, _ = make([ASK, THANKS], Later())
    await conversation.say("add it", by="grace")
    await conversation.answer("ask-1", "groceries", by="ada")
    return conversation


async def instead() -> Conversation:
    conversation, _, _ = make([ADD_MILK, THANKS], scripted_human([{"say": "no, tea"}]))
    await conversation.say("add milk")
    return conversation


async def refused_then_valid() -> Conversation:
    conversation, _, _ = make(
        [ADD_MILK, THANKS], scripted_human([{"edit": {"text": ""}}, {"edit": {"text": "tea"}}])
    )
    await conversation.say("add milk")
    return conversation


async def refused_waiting() -> Conversation:
    conversation, _, _ = make([ADD_MILK, THANKS], Later())
    await conversation.say("add milk")
    await conversation.decide("sg-1", Edit({"text": ""}), by="ada")
    return conversation


async def invalid() -> Conversation:
    conversation, _, _ = make([envelope(suggest("fly", "{}"), suggest("add-note", "{}")), THANKS])
    await conversation.say("fly")
    return conversation


async def failed() -> Conversation:
    conversation, _, _ = make([envelope(suggest("fail-note", "{}")), THANKS])
    await conversation.say("fail")
    return conversation


async def read_only_and_handoff() -> Conversation:
    conversation, _, _ = make([envelope(suggest("list-notes", "{}"), suggest("open-poll", "{}")), THANKS])
    await conversation.say("look")
    return conversation


async def dismissed_later() -> Conversation:
    conversation, _, _ = make([ADD_MILK], Later())
    await conversation.say("add milk")
    await conversation.decide("sg-1", Dismiss(), by="grace")
    return conversation


async def expired() -> Conversation:
    conversation, _, _ = make([ADD_MILK], Away(), decide_timeout=0.02)
    await conversation.say("add milk")
    return conversation


async def no_reply() -> Conversation:
    conversation, _, _ = make([hang], timeout=0.05)
    await conversation.say("hello?")
    return conversation


async def turn_limit() -> Conversation:
    looping = envelope(suggest("list-notes", "{}"))
    conversation, _, _ = make([looping, looping], max_turns=2)
    await conversation.say("go")
    return conversation


async def reply_refused() -> Conversation:
    conversation, _, _ = make(["<dial><dial-inform> </dial-inform></dial>", THANKS])
    await conversation.say("hi")
    return conversation


async def send_failed() -> Conversation:
    def fail(message: str) -> str:
        raise ConnectionError("connection reset")

    conversation, _, _ = make([fail])
    with pytest.raises(ConnectionError):
        await conversation.say("hi")
    return conversation


async def interrupted() -> Conversation:
    stall = Stall()

    class Waits:
        async def decide(self, suggestion: Suggestion) -> Any:
            await stall()

    conversation, _, _ = make([ADD_MILK, THANKS], Waits())
    conversation.cancelling("the person left")
    await stall.interrupt(partial(conversation.say, "go"))
    return conversation


async def asides() -> Conversation:
    reply = envelope(
        '<dial-declare context-key="mood">"calm"</dial-declare>',
        '<dial-delegate to="billing">Refunds are theirs.</dial-delegate>',
        '<dial-phatic signal="session-complete"/>',
    )
    conversation, _, _ = make([reply])
    await conversation.say("bye")
    return conversation


CONVERSATIONS: dict[str, Callable[[], Awaitable[Conversation]]] = {
    "accepted": accepted,
    "destructive": destructive,
    "answered_later": answered_later,
    "instead": instead,
    "refused_then_valid": refused_then_valid,
    "refused_waiting": refused_waiting,
    "invalid": invalid,
    "failed": failed,
    "read_only_and_handoff": read_only_and_handoff,
    "dismissed_later": dismissed_later,
    "expired": expired,
    "no_reply": no_reply,
    "turn_limit": turn_limit,
    "reply_refused": reply_refused,
    "send_failed": send_failed,
    "interrupted": interrupted,
    "asides": asides,
}


# --- what each shows --------------------------------------------------------------------------------------------


def check_accepted(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    words = of(PersonWords, items)
    assert [(w.text, w.how) for w in words] == [("hi", "said"), ("add a note: buy milk", "said")]
    assert [(t.text, t.act) for t in of(AgentText, items)] == [
        ("Hello!", None), ("Sure.", "inform"), ("Noted.", "acknowledge"),
    ]  # fmt: skip
    (card,) = of(Card, items)
    assert (card.id, card.action, card.text, card.preview) == (
        "sg-1", "add-note", "Add milk to your notes", "Add the note 'buy milk'",
    )  # fmt: skip
    assert (card.status, card.outcome, card.result, card.payload) == (
        "done",
        "Done",
        '{"count": 1}',
        {"text": "buy milk"},
    )
    decided = next(entry for entry in log if entry.event.type == "decided")
    assert (card.decision, card.decided_at) == ("accept", decided.time)
    assert card.reported is not None and card.reported.fact() == {
        "action": "add-note",
        "status": "done",
        "result": {"count": 1},
    }
    assert [told.reports for told in of(Told, items)] == [(), (), ("sg-1:done",)]


def check_destructive(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.destructive, card.status) == (True, "done")


def check_answered_later(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (question,) = of(Question, items)
    assert (question.status, question.answer, question.answered_by) == ("answered", "groceries", "ada")
    assert log[0].event == SaidEvent(text="add it", by="grace")
    assert [(w.text, w.how, w.by, w.subject_id) for w in of(PersonWords, items)] == [
        ("add it", "said", "grace", None), ("groceries", "answer", "ada", "ask-1"),
    ]  # fmt: skip


def check_instead(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.decision, card.outcome) == (
        "superseded", "say", "Superseded: the person said something else",
    )  # fmt: skip
    assert [(w.text, w.how, w.subject_id) for w in of(PersonWords, items)][-1] == ("no, tea", "instead", "sg-1")


def check_refused_then_valid(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.payload, card.proposed) == ("done", {"text": "tea"}, {"text": "buy milk"})
    assert card.issue is None and card.preview == "Add the note 'tea'"
    (refusal,) = card.refusals
    assert (refusal.payload, refusal.code, refusal.field) == ({"text": ""}, "missing-text", "text")
    assert refusal.hint == "Give the note's text."


def check_refused_waiting(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.payload, card.decided_by) == ("deferred-waiting", {"text": ""}, "ada")
    assert card.issue is not None and card.issue.code == "missing-text"


def check_invalid(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    assert of(Card, items) == []
    fly, note = of(RefusedProposal, items)
    assert (fly.action, fly.status, fly.code) == ("fly", "invalid", "unknown-action")
    assert (note.action, note.code, note.field, note.hint) == (
        "add-note",
        "missing-text",
        "text",
        "Give the note's text.",
    )
    assert note.payload == {} and note.outcome == "Invalid: Give the note's text."


def check_failed(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.outcome) == ("failed", "Failed: the notebook is locked")
    assert card.reported is not None and card.reported.code == "locked"


def check_read_only_and_handoff(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    listed, poll = of(Card, items)
    assert (listed.mutates, listed.status, listed.outcome, listed.decision) == (False, "done", "Done", None)
    assert (poll.handoff, poll.status, poll.outcome) == (True, "handed-off", "Handed off")


def check_dismissed_later(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.outcome, card.decided_by) == ("dismissed", "Dismissed", "grace")


def check_expired(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.outcome, card.decision) == ("dismissed", "Expired", "expire")
    (notice,) = of(Notice, items)
    assert (notice.what, notice.subject_id) == ("deadline", "sg-1")


def check_no_reply(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (notice,) = of(Notice, items)
    assert (notice.what, notice.turn) == ("no-reply", 1)
    assert notice.text == "no reply: The agent didn't reply within 0.05s"


def check_turn_limit(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (notice,) = of(Notice, items)
    assert (notice.what, notice.text, notice.data) == ("turn-limit", "stopped after 2 turns", {"turns": 2})


def check_reply_refused(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (notice,) = of(Notice, items)
    assert (notice.what, notice.turn) == ("reply-refused", 1)


def check_send_failed(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (notice,) = of(Notice, items)
    assert (notice.what, notice.text) == (
        "send-failed",
        "the message could not be sent: ConnectionError",  # an agent's own exception: its type, not its text
    )


def check_interrupted(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    (card,) = of(Card, items)
    assert (card.status, card.outcome) == ("superseded", "Superseded")
    (notice,) = of(Notice, items)
    assert (notice.what, notice.text) == ("interrupted", "the agent's turn stopped: the person left")


def check_asides(items: tuple[Item, ...], log: tuple[LogEntry, ...]) -> None:
    assert [(a.what, a.text) for a in of(Aside, items)] == [
        ("declare", 'the agent notes mood = "calm"'),
        ("delegate", "the agent hands over to billing: Refunds are theirs."),
        ("phatic", "the agent ends the conversation"),
    ]


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
async def test_each_conversation_projects_what_the_person_saw(name: str) -> None:
    conversation = await CONVERSATIONS[name]()
    log = conversation.log
    projection = project(log)
    globals()[f"check_{name}"](projection.items, log)
    encoded = msgspec.json.encode(projection.items)
    assert msgspec.json.decode(encoded, type=tuple[Item, ...]) == projection.items


# --- deciding ---------------------------------------------------------------------------------------------------


async def test_what_waits_carries_the_digest_of_the_payload_waiting() -> None:
    conversation = await refused_waiting()
    projection = project(conversation.log)
    (waiting,) = projection.waiting
    assert (waiting.id, waiting.kind, waiting.deferred, waiting.refusals) == ("sg-1", "suggestion", True, 1)
    assert waiting.digest == payload_digest("add-note", {"text": ""}) == conversation.pending[0].digest
    conversation2, _, _ = make([ASK], Later())
    await conversation2.say("go")
    ((ask),) = project(conversation2.log).waiting
    assert (ask.id, ask.kind, ask.deferred, ask.digest) == ("ask-1", "ask", True, None)


async def test_an_outcome_of_a_suggestion_shown_earlier_ends_a_card() -> None:
    log = (await accepted()).log
    outcome = next(entry for entry in log if entry.event.type == "outcome")
    projection = Projection(shown={"sg-1"})
    (card,) = projection.feed(outcome)
    assert isinstance(card, Card) and (card.status, card.outcome) == ("done", "Done")
    assert isinstance(Projection().feed(outcome)[0], RefusedProposal)


def test_feeding_returns_what_changed_as_it_is_now() -> None:
    log = trio_run(accepted).log
    projection = Projection()
    returned: dict[str, Any] = {}
    for entry in log:
        for item in projection.feed(entry):
            if isinstance(item, Card):
                returned[item.id] = item
    assert returned == {card.id: card for card in of(Card, projection.items)}


def test_a_message_too_large_to_read_reports_nothing() -> None:
    (told,) = Projection().feed(SentEvent(turn=1, message="x" * ((16 << 20) + 1)))
    assert isinstance(told, Told) and told.reports == ()


# --- pieces, live and reloads -----------------------------------------------------------------------------------


def whole(log: tuple[LogEntry, ...]) -> tuple[Any, ...]:
    projection = project(log)
    return projection.items, projection.trail, projection.waiting


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
async def test_a_log_fed_in_random_pieces_projects_as_fed_whole(name: str) -> None:
    log = (await CONVERSATIONS[name]()).log
    expected = whole(log)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.integers(min_value=0, max_value=len(log)), max_size=8))
    def pieces(cuts: list[int]) -> None:
        projection = Projection()
        bounds = [0, *sorted(cuts), len(log)]
        for start, end in itertools.pairwise(bounds):
            projection.feed_all(log[start:end])
            assert projection.feed_all(log[:end]) == ()  # entries fed already change nothing
        assert (projection.items, projection.trail, projection.waiting) == expected

    pieces()


class Live:
    """A surface that projects as the conversation runs: at each event shown, what the log added since."""

    def __init__(self) -> None:
        self.projection = Projection()
        self.conversation: Conversation | None = None

    def on_event(self, event: object) -> None:
        assert self.conversation is not None
        self.projection.feed_all(self.conversation.log[self.projection.fed :])


async def test_live_and_reloaded_projections_are_the_same() -> None:
    """The web's reload cases: preview and destructive mark, the person's answer, words given instead and the
    payload that ran after a refused edit, live as after a reload from the store."""
    store = open_store("memory:")
    live = Live()
    steps = [
        envelope(suggest("remove-note", '{"text":"x"}'), '<dial-ask id="ask-1">Which list?</dial-ask>'),
        ADD_MILK,
        ADD_MILK,
        THANKS,
    ]
    conversation = await Conversation.open(
        store, "c-1", agent=Agent(steps), domain=Notes(), human=Later(), on_event=live.on_event
    )
    live.conversation = conversation
    await conversation.say("tidy up")
    await conversation.decide("sg-1", Accept(), by="ada")
    await conversation.answer("ask-1", "groceries", by="ada")
    await conversation.decide("sg-2", Say("not milk"), by="ada")
    await conversation.decide("sg-3", Edit({"text": ""}), by="ada")
    await conversation.decide("sg-3", Edit({"text": "tea"}), by="ada")
    live.on_event(None)
    stored = await store.read("c-1")
    reopened = await Conversation.open(store, "c-1", agent=Agent([]), domain=Notes(), human=Later())
    assert whole(tuple(stored)) == whole(reopened.log) == (
        live.projection.items, live.projection.trail, live.projection.waiting,
    )  # fmt: skip
    items = live.projection.items
    removed, milk, tea = of(Card, items)
    assert (removed.preview, removed.destructive, removed.status) == ("remove-note", True, "done")
    assert (milk.status, tea.status, tea.payload) == ("superseded", "done", {"text": "tea"})
    assert [(w.text, w.how, w.by) for w in of(PersonWords, items)] == [
        ("tidy up", "said", None), ("groceries", "answer", "ada"), ("not milk", "instead", "ada"),
    ]  # fmt: skip
    await store.aclose()


async def test_bare_events_as_on_event_shows_them_make_the_same_cards() -> None:
    shown: list[Any] = []
    conversation, _, _ = make([ADD_MILK, THANKS])
    conversation.on_event = shown.append
    await conversation.say("add milk")
    from_events = project(shown)
    (card,) = of(Card, from_events.items)
    (logged,) = of(Card, project(conversation.log).items)
    assert (card.preview, card.status, card.outcome, card.result) == (
        logged.preview, logged.status, logged.outcome, logged.result,
    )  # fmt: skip
    assert card.seq is None and logged.seq is not None
