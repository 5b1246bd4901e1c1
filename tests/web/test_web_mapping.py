"""The one function from runtime events to AG-UI events, case by case; and the snapshot built from a log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from dial_runtime import Accept, Ask, Conversation, Defer, Edit, Issue, LogEntry, Say, Suggestion
from dial_runtime.language.records import Option
from dial_runtime.runtime.events import InformDeltaEvent, event_from_dict
from dial_runtime.views.person import project
from dial_runtime.web import EventMapper, interrupt_for, messages_from_log, payload_digest
from dial_runtime.web.mapping import item_view

from ..fakes import Agent, Notes, StreamingAgent, envelope, suggest

SUGGESTION = {
    "type": "suggestion",
    "id": "sg-1",
    "action": "add-note",
    "text": "",
    "payload": {"text": "a"},
    "preview": "Add a",
    "destructive": False,
    "mutates": True,
}
OUTCOME = {"type": "outcome", "id": "sg-1", "action": "add-note", "status": "done", "result": {"count": 1}}


def wire(events: list[Any]) -> list[tuple[str, Any]]:
    """Each AG-UI event's type and its one telling field."""
    shown = []
    for event in events:
        data = event.model_dump(by_alias=True)
        detail = data.get("activityType") or data.get(
            "delta", data.get("toolCallName", data.get("content", data.get("name")))
        )
        shown.append((data["type"].value if hasattr(data["type"], "value") else data["type"], detail))
    return shown


def delta(text: str, element: int) -> InformDeltaEvent:
    """A text delta of the element being read, as the runtime shows it while a reply streams."""
    return InformDeltaEvent(text=text, act="inform" if element >= 0 else "prose", element=element)


CASES: list[tuple[str, list[Any], list[tuple[str, Any]]]] = [
    (
        "an inform is one whole text message",
        [{"type": "inform", "text": "Hello", "act": "inform", "element": 0}],
        [("TEXT_MESSAGE_START", None), ("TEXT_MESSAGE_CONTENT", "Hello"), ("TEXT_MESSAGE_END", None)],
    ),
    (
        "prose is a text message too",
        [{"type": "inform", "text": "Sure.", "act": None}],
        [("TEXT_MESSAGE_START", None), ("TEXT_MESSAGE_CONTENT", "Sure."), ("TEXT_MESSAGE_END", None)],
    ),
    ("an empty inform shows nothing", [{"type": "inform", "text": "", "act": None}], []),
    (
        "an ask's question is agent text",
        [{"type": "ask", "text": "Which?", "id": "q"}],
        [("TEXT_MESSAGE_START", None), ("TEXT_MESSAGE_CONTENT", "Which?"), ("TEXT_MESSAGE_END", None)],
    ),
    (
        "a suggestion is a tool call with its payload as arguments",
        [SUGGESTION],
        [("TOOL_CALL_START", "add-note"), ("TOOL_CALL_ARGS", '{"text":"a"}'), ("TOOL_CALL_END", None)],
    ),
    (
        "a shown suggestion's outcome is its tool result",
        [SUGGESTION, OUTCOME],
        [
            ("TOOL_CALL_START", "add-note"),
            ("TOOL_CALL_ARGS", '{"text":"a"}'),
            ("TOOL_CALL_END", None),
            ("TOOL_CALL_RESULT", '{"action":"add-note","result":{"count":1},"status":"done"}'),
        ],
    ),
    (
        "an invalid suggestion was never shown: it is a refused proposal, an activity and never a tool call",
        [{**OUTCOME, "status": "invalid", "code": "missing-text", "result": None}],
        [("ACTIVITY_SNAPSHOT", "dial.refused")],
    ),
    (
        "the elements the runtime only shows are custom events, and activities the person sees",
        [{"type": "declare", "context_key": "k", "value": 1}, {"type": "turn-limit", "turns": 8}],
        [
            ("CUSTOM", "dial.declare"),
            ("ACTIVITY_SNAPSHOT", "dial.aside"),
            ("CUSTOM", "dial.turn-limit"),
            ("ACTIVITY_SNAPSHOT", "dial.notice"),
        ],
    ),
    (
        "an aside with nothing to say is no activity",
        [{"type": "phatic", "signal": "greeting"}],
        [("CUSTOM", "dial.phatic")],
    ),
    (
        "events only the log needs show nothing",
        [{"type": "sent", "turn": 1, "message": "m"}, {"type": "reply", "turn": 1, "text": "r"}],
        [],
    ),
    (
        "text deltas stream into one message that the element's inform closes",
        [delta("Hel", 0), delta("lo", 0), {"type": "inform", "text": "Hello", "act": "inform", "element": 0}],
        [
            ("TEXT_MESSAGE_START", None),
            ("TEXT_MESSAGE_CONTENT", "Hel"),
            ("TEXT_MESSAGE_CONTENT", "lo"),
            ("TEXT_MESSAGE_END", None),
        ],
    ),
    (
        "the inform adds what its deltas had not carried yet",
        [delta("Use a ", -1), {"type": "inform", "text": "Use a <tag>.", "act": None, "element": -1}],
        [
            ("TEXT_MESSAGE_START", None),
            ("TEXT_MESSAGE_CONTENT", "Use a "),
            ("TEXT_MESSAGE_CONTENT", "<tag>."),
            ("TEXT_MESSAGE_END", None),
        ],
    ),
    (
        "prose after the envelope streams and closes like an element",
        [delta("Bye", -2), delta(" now.", -2), {"type": "inform", "text": "Bye now.", "act": None, "element": -2}],
        [
            ("TEXT_MESSAGE_START", None),
            ("TEXT_MESSAGE_CONTENT", "Bye"),
            ("TEXT_MESSAGE_CONTENT", " now."),
            ("TEXT_MESSAGE_END", None),
        ],
    ),
    (
        "a delta of the next element closes the open message first",
        [delta("A", 0), delta("B", 1), SUGGESTION],
        [
            ("TEXT_MESSAGE_START", None),
            ("TEXT_MESSAGE_CONTENT", "A"),
            ("TEXT_MESSAGE_END", None),
            ("TEXT_MESSAGE_START", None),
            ("TEXT_MESSAGE_CONTENT", "B"),
            ("TEXT_MESSAGE_END", None),
            ("TOOL_CALL_START", "add-note"),
            ("TOOL_CALL_ARGS", '{"text":"a"}'),
            ("TOOL_CALL_END", None),
        ],
    ),
]


@pytest.mark.parametrize(("events", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_runtime_events_map_to_agui_events(events: list[Any], expected: list[tuple[str, Any]]) -> None:
    mapper = EventMapper()
    mapped = []
    for event in events:
        mapped += mapper.map(event_from_dict(event) if isinstance(event, dict) else event)
    mapped += mapper.close()
    assert wire(mapped) == expected


def test_every_text_message_is_opened_and_closed_under_one_id() -> None:
    mapper = EventMapper()
    mapped = [*mapper.map(delta("a", 0)), *mapper.map(event_from_dict(SUGGESTION)), *mapper.close()]
    ids = [getattr(event, "message_id", None) for event in mapped[:3]]
    assert ids == ["m-1", "m-1", "m-1"]


def test_a_snapshot_holds_words_text_tool_calls_and_results_in_order() -> None:
    events = [
        {"type": "said", "text": "add a"},
        {"type": "inform", "text": "Sure.", "act": None},
        SUGGESTION,
        OUTCOME,
        {"type": "said", "text": ""},
    ]
    log = [LogEntry(seq=seq, time=0.0, event=event_from_dict(event)) for seq, event in enumerate(events, 1)]
    messages = [message.model_dump(by_alias=True) for message in messages_from_log(log)]
    assert [(m["role"], m["id"]) for m in messages] == [
        ("user", "said-1"),
        ("assistant", "m-2"),
        ("assistant", "call-3"),
        ("tool", "m-4"),
    ]
    assert messages[2]["toolCalls"][0]["function"] == {"name": "add-note", "arguments": '{"text":"a"}'}
    assert messages[3]["toolCallId"] == "sg-1"


def test_a_refused_suggestion_is_a_new_interrupt_carrying_the_issue() -> None:
    refused = Suggestion(
        id="sg-1",
        action="add-note",
        payload={"text": ""},
        preview="Add",
        issue=Issue(code="c", field="text", hint="h"),
    )
    interrupt = interrupt_for(refused, refusals=1).model_dump(by_alias=True)
    assert interrupt["id"] == "sg-1~2"
    assert interrupt["metadata"]["issue"] == {"code": "c", "field": "text", "hint": "h"}
    assert interrupt["metadata"]["digest"] == payload_digest("add-note", {"text": ""})


def test_an_ask_interrupt_lists_its_options() -> None:
    ask = Ask(
        id="q", text="Which?", response_type="choice", options=(Option(value="a", label="A"), Option(value="b"))
    )
    interrupt = interrupt_for(ask).model_dump(by_alias=True)
    assert (interrupt["reason"], interrupt["message"]) == ("input_required", "Which?")
    assert interrupt["metadata"]["options"] == [{"value": "a", "label": "A"}, {"value": "b", "label": "b"}]


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (("add-note", {"text": "a", "n": 1}), ("add-note", {"n": 1, "text": "a"}), True),
        (("add-note", {"text": "a"}), ("add-note", {"text": "b"}), False),
        (("add-note", {"text": "a"}), ("remove-note", {"text": "a"}), False),
    ],
)
def test_the_digest_covers_action_and_payload_not_key_order(first: Any, second: Any, same: bool) -> None:
    assert (payload_digest(*first) == payload_digest(*second)) is same


# --- live and after a reload: the same conversation -------------------------------------------------------------


class Later:
    """The person on the web: every decision and answer comes in a later call."""

    def decide(self, suggestion: Suggestion) -> Defer:
        return Defer()

    def answer(self, ask: Ask) -> Defer:
        return Defer()


async def reloadable() -> tuple[LogEntry, ...]:
    """A destructive card accepted, an ask answered, words given instead of deciding, and a refused edit then a
    valid one (the cases a reload used to show otherwise than live)."""
    agent = Agent(
        [
            envelope(suggest("remove-note", '{"text":"x"}'), '<dial-ask id="ask-1">Which list?</dial-ask>'),
            envelope(suggest("add-note", '{"text":"milk"}')),
            envelope(suggest("add-note", '{"text":"milk"}')),
            envelope("<dial-acknowledge>Noted.</dial-acknowledge>"),
        ]
    )
    conversation = Conversation(agent=agent, domain=Notes(), human=Later())
    await conversation.say("tidy up")
    await conversation.decide("sg-1", Accept(), by="ada")
    await conversation.answer("ask-1", "groceries", by="ada")
    await conversation.decide("sg-2", Say("not milk"), by="ada")
    await conversation.decide("sg-3", Edit({"text": ""}), by="ada")
    await conversation.decide("sg-3", Edit({"text": "tea"}), by="ada")
    return conversation.log


def live_view(log: tuple[LogEntry, ...]) -> tuple[dict[str, Any], list[str]]:
    """What a live client ends up with: each card's last ``metadata.card`` (or ``dial.card``), and the person's
    words it was sent."""
    mapper = EventMapper()
    cards: dict[str, Any] = {}
    words: list[str] = []
    for entry in log:
        for event in mapper.map(entry):
            data = event.model_dump(by_alias=True)
            if data.get("metadata") and "card" in data["metadata"]:
                cards[data["toolCallId"]] = data["metadata"]["card"]
            if data["type"] == "CUSTOM" and data["name"] == "dial.card":
                cards[data["value"]["card"]["id"]] = data["value"]["card"]
            if data["type"] == "TEXT_MESSAGE_CONTENT" and data["messageId"].startswith("said-"):
                words.append(data["delta"])
    return cards, words


def live_items(log: Sequence[LogEntry]) -> list[dict[str, Any]]:
    """The views a live client ends up with of questions (as last sent), notices, asides and refused proposals,
    in the order they came."""
    mapper = EventMapper()
    views: dict[Any, dict[str, Any]] = {}
    for entry in log:
        for event in mapper.map(entry):
            data = event.model_dump(by_alias=True)
            if data["type"] == "ACTIVITY_SNAPSHOT":
                views[data["messageId"]] = data["content"]
            elif data["type"] == "TEXT_MESSAGE_START" and data.get("metadata") and "question" in data["metadata"]:
                views[data["metadata"]["question"]["id"]] = data["metadata"]["question"]
            elif data["type"] == "CUSTOM" and data["name"] == "dial.question":
                views[data["value"]["question"]["id"]] = data["value"]["question"]
    return list(views.values())


def reload_items(log: Sequence[LogEntry]) -> list[dict[str, Any]]:
    """The same views, as a snapshot carries them."""
    views = []
    for message in messages_from_log(log):
        data = message.model_dump(by_alias=True)
        if data["role"] == "activity":
            views.append(data["content"])
        elif data["role"] == "assistant" and data.get("metadata") and "question" in data["metadata"]:
            views.append(data["metadata"]["question"])
    return views


def reload_view(log: tuple[LogEntry, ...]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    messages = [message.model_dump(by_alias=True) for message in messages_from_log(log)]
    cards = {m["toolCallId"]: m["metadata"]["card"] for m in messages if m["role"] == "tool"}
    return cards, [m for m in messages if m["role"] == "user"]


@pytest.mark.anyio
async def test_a_reload_shows_the_conversation_as_it_was_shown_live() -> None:
    log = await reloadable()
    live_cards, live_words = live_view(log)
    cards, users = reload_view(log)
    assert cards == live_cards
    removed, milk, tea = cards["sg-1"], cards["sg-2"], cards["sg-3"]
    assert (removed["preview"], removed["destructive"], removed["outcome"]) == ("remove-note", True, "Done")
    assert (milk["status"], milk["outcome"]) == ("superseded", "Superseded: the person said something else")
    assert (tea["status"], tea["payload"], tea["proposed"]) == ("done", {"text": "tea"}, {"text": "milk"})
    assert (tea["payload_json"], tea["digest"]) == (
        '{\n  "text": "tea"\n}',
        payload_digest("add-note", {"text": "tea"}),
    )
    assert [refusal["payload"] for refusal in tea["refusals"]] == [{"text": ""}]
    assert [(m["content"], m["metadata"]["words"]["how"], m["metadata"]["words"]["by"]) for m in users] == [
        ("tidy up", "said", None),
        ("groceries", "answer", "ada"),
        ("not milk", "instead", "ada"),
    ]
    assert live_words == ["groceries"]  # the client sent its other words itself
    ids = [m["id"] for m in users]
    assert all(ident.startswith("said-") for ident in ids)  # sent back, none is said again


@pytest.mark.anyio
async def test_tool_results_sit_where_the_live_stream_put_them() -> None:
    log = await reloadable()
    roles = [(m.role, getattr(m, "tool_call_id", None)) for m in messages_from_log(log)]
    assert roles.index(("tool", "sg-1")) > roles.index(("user", None)) and roles[-1] == ("assistant", None)
    assert roles.index(("tool", "sg-2")) < roles.index(("tool", "sg-3"))


@pytest.mark.anyio
async def test_a_resume_shows_only_what_it_adds_to_what_the_client_was_shown() -> None:
    log = await reloadable()
    answered = next(entry.seq for entry in log if entry.event.type == "answered")
    mapper = EventMapper(history=log[: answered - 1])
    shown = wire(mapper.catch_up(log[:answered]))
    assert shown == [
        ("CUSTOM", "dial.question"),
        ("TEXT_MESSAGE_START", None),
        ("TEXT_MESSAGE_CONTENT", "groceries"),
        ("TEXT_MESSAGE_END", None),
    ]


@pytest.mark.anyio
async def test_refused_proposals_notices_and_questions_are_the_same_live_and_after_a_reload() -> None:
    """A proposal the runtime refused is shown (never as a card), as is the turn limit, live and in a snapshot."""
    agent = Agent(
        [
            envelope(
                suggest("add-note", '{"text":"milk"}'),
                suggest("add-note", '{"text":""}'),
                '<dial-ask id="ask-1">Which list?</dial-ask>',
            ),
            *[envelope(suggest("list-notes", "{}")) for _ in range(3)],
        ]
    )
    conversation = Conversation(agent=agent, domain=Notes(), human=Later(), max_turns=2)
    await conversation.say("add two")
    await conversation.answer("ask-1", "home")
    await conversation.decide("sg-1", Accept())
    views = reload_items(conversation.log)
    assert views == live_items(conversation.log)
    kinds = [(view["kind"], view.get("what"), view.get("status")) for view in views]
    assert kinds[:2] == [("refused", None, "invalid"), ("question", None, "answered")]
    assert ("notice", "turn-limit", None) in kinds
    (refused,) = [view for view in views if view["kind"] == "refused"]
    assert (refused["hint"], refused["payload_json"]) == ("Give the note's text.", '{\n  "text": ""\n}')
    messages = [message.model_dump(by_alias=True) for message in messages_from_log(conversation.log)]
    assert [call["id"] for m in messages for call in m.get("toolCalls") or []] == ["sg-1", "sg-3"]


@pytest.mark.anyio
async def test_a_payload_is_also_its_exact_json_text() -> None:
    """Past 2**53 a browser's JSON.parse rounds: the card's ``payload_json`` keeps every digit, live and after a
    reload, and its digest binds that number."""
    big = 9007199254740993
    agent = Agent([envelope(suggest("add-note", f'{{"text":"pay","amount_cents":{big}}}'))])
    conversation = Conversation(agent=agent, domain=Notes(), human=Later())
    await conversation.say("pay")
    live, _ = live_view(conversation.log)
    shown, _ = reload_view_all(conversation.log)
    for card in (live["sg-1"], shown["sg-1"]):
        assert f'"amount_cents": {big}' in card["payload_json"]
        assert card["digest"] == payload_digest("add-note", {"text": "pay", "amount_cents": big})


def reload_view_all(log: Sequence[LogEntry]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every card of a snapshot (waiting or ended) by id, and its messages."""
    messages = [message.model_dump(by_alias=True) for message in messages_from_log(log)]
    cards = {
        m["metadata"]["card"]["id"]: m["metadata"]["card"]
        for m in messages
        if (m.get("metadata") or {}).get("card")
    }
    return cards, messages


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_an_unconfirmed_acknowledgement_is_marked_live_and_after_a_reload(streamed: bool) -> None:
    """An acknowledgement of a suggestion that never existed reaches the client as the agent's claim, marked, on
    both paths: the text message's ``metadata.unconfirmed``, or ``CUSTOM dial.unconfirmed`` when its text streamed
    before the runtime could check it."""
    invented = '<dial-acknowledge of="sg-9" yield="sg-9:done">Done: I paid the bill.</dial-acknowledge>'
    replies = [envelope(invented), envelope("<dial-acknowledge>Sorry.</dial-acknowledge>")]
    mapper = EventMapper()
    live: list[Any] = []
    held: list[Conversation] = []

    def on_event(shown: Any) -> None:
        """As the web surface maps what it is shown: the log up to it, or the text still arriving."""
        if isinstance(shown, InformDeltaEvent):
            live.extend(mapper.map(shown))
        else:
            live.extend(mapper.catch_up(held[0].log, through=shown))

    agent = StreamingAgent(replies, size=5) if streamed else Agent(replies)
    held.append(Conversation(agent=agent, domain=Notes(), human=Later(), on_event=on_event))
    await held[0].say("pay it")
    marks = []
    for event in live:
        data = event.model_dump(by_alias=True)
        if data["type"] == "TEXT_MESSAGE_START" and (data.get("metadata") or {}).get("unconfirmed"):
            marks.append(data["metadata"]["unconfirmed"])
        if data["type"] == "CUSTOM" and data["name"] == "dial.unconfirmed":
            marks.append(data["value"]["unconfirmed"])
    snapshot = [message.model_dump(by_alias=True) for message in messages_from_log(held[0].log)]
    reloaded = [m["metadata"]["unconfirmed"] for m in snapshot if (m.get("metadata") or {}).get("unconfirmed")]
    assert len(marks) == 1 and marks == reloaded
    assert "sg-9" in marks[0]
    (text,) = [m["content"] for m in snapshot if (m.get("metadata") or {}).get("unconfirmed")]
    assert text == "Done: I paid the bill."


RESULTS = [
    (
        {"count": 12345678901234567891, "notes": ["a"]},
        [{"name": "count", "json": "12345678901234567891"}, {"name": "notes", "json": '["a"]'}],
    ),
    ({}, []),
    ([1, 2], None),
    ("done", None),
    (None, None),
]


@pytest.mark.parametrize(("returned", "fields"), RESULTS)
def test_what_a_done_action_returned_is_given_field_by_field_when_it_is_an_object(
    returned: Any, fields: Any
) -> None:
    events = [SUGGESTION, {**OUTCOME, "result": returned}]
    card = project([event_from_dict(event) for event in events]).card("sg-1")
    assert card is not None
    assert item_view(card)["result_fields"] == fields
