"""Streamed replies: each speech act is handled as soon as it is complete; outcomes as for a whole reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from dial_runtime import Accept, Conversation, open_store, policy_human, scripted_human
from dial_runtime.driver.conversation import READ_AHEAD
from dial_runtime.language.stream import StreamParser
from dial_runtime.llm.chat import ChatMessage, history_from_log
from dial_runtime.runtime.events import LogEntry, entry_from_dict, entry_to_dict

from ..fakes import Agent, Notes, Stall, StreamingAgent, envelope, suggest
from .test_runtime import LIFECYCLE

pytestmark = pytest.mark.anyio


def comparable(conversation: Conversation) -> list[dict[str, Any]]:
    """The log's events, without the ones whose place or form differs when a reply streams, and without the
    runs' idempotency keys (each conversation has keys of its own)."""
    skipped = {"reply", "reply-started", "inform"}
    events = [entry_to_dict(entry)["event"] for entry in conversation.log if entry.event.type not in skipped]
    for event in events:
        event.pop("key", None)
    return events


@pytest.mark.parametrize("size", [1, 5, 1000])
@pytest.mark.parametrize(
    ("elements", "steps"), [case[1:3] for case in LIFECYCLE], ids=[case[0] for case in LIFECYCLE]
)
async def test_every_lifecycle_case_ends_the_same_streamed_or_not(
    elements: list[str], steps: list[Any], size: int
) -> None:
    reply = envelope(*elements, "<dial-inform>and that is all</dial-inform>", prose="Here you go.") + " Bye."
    runs = []
    expected_informs = [["Here you go.\n Bye.", "and that is all"], ["Here you go.", "and that is all", "Bye."]]
    for agent, informs in zip(
        (Agent([reply, "ok"]), StreamingAgent([reply, "ok"], size=size)), expected_informs, strict=True
    ):
        conversation = Conversation(agent=agent, domain=Notes(), human=scripted_human(steps))
        result = await conversation.say("go")
        runs.append((result, agent.sent, comparable(conversation)))
        follow = ["ok"] if result.turns == 2 else []
        assert [e.event.text for e in conversation.log if e.event.type == "inform"] == informs + follow
    assert runs[0] == runs[1]


async def test_an_inform_is_shown_while_the_rest_is_still_arriving() -> None:
    shown = anyio.Event()

    class Slow:
        def send(self, message: str) -> str:
            raise AssertionError("the runtime must stream")

        async def stream(self, message: str) -> AsyncIterator[str]:
            yield "<dial><dial-inform>first</dial-inform>"
            with anyio.fail_after(5):
                await shown.wait()
            yield "<dial-inform>second</dial-inform></dial>"

    def on_event(event: Any) -> None:
        if event.type == "inform" and event.text == "first":
            shown.set()

    conversation = Conversation(agent=Slow(), domain=Notes(), human=policy_human(), on_event=on_event)
    result = await conversation.say("go")
    assert result.status == "idle"
    assert [e.event.text for e in conversation.log if e.event.type == "inform"] == ["first", "second"]


async def test_a_suggestion_waits_for_the_declare_that_may_follow_it() -> None:
    reply = envelope(suggest("add-note"), '<dial-declare context-key="add-note">{"text":"milk"}</dial-declare>')
    domain = Notes()
    conversation = Conversation(agent=StreamingAgent([reply, "ok"], size=3), domain=domain, human=policy_human())
    result = await conversation.say("go")
    assert [(o.status, o.preview) for o in result.outcomes] == [("done", "Add the note 'milk'")]
    assert domain.ran == [("add-note", {"text": "milk"})]


async def test_no_first_chunk_before_the_deadline_is_no_reply() -> None:
    class Silent:
        def send(self, message: str) -> str:
            raise AssertionError

        async def stream(self, message: str) -> AsyncIterator[str]:
            await anyio.sleep_forever()
            yield ""

    conversation = Conversation(agent=Silent(), domain=Notes(), human=policy_human(), timeout=0.02)
    result = await conversation.say("go")
    assert result.status == "no-reply"


async def test_a_stream_that_fails_before_its_first_chunk_raises_the_original_error() -> None:
    class Refusing:
        def send(self, message: str) -> str:
            raise AssertionError

        async def stream(self, message: str) -> AsyncIterator[str]:
            raise ConnectionResetError("gone")
            yield ""

    conversation = Conversation(agent=Refusing(), domain=Notes(), human=policy_human())
    with pytest.raises(ConnectionResetError, match="gone"):
        await conversation.say("go")
    assert [e.event.type for e in conversation.log][-2:] == ["send-failed", "finished"]


async def test_a_stream_that_breaks_off_ends_the_reply_where_it_stopped() -> None:
    class Broken:
        def send(self, message: str) -> str:
            raise AssertionError

        async def stream(self, message: str) -> AsyncIterator[str]:
            yield envelope(suggest("list-notes", "{}"))[: -len("</dial>")]
            raise ConnectionResetError("cut")

    conversation = Conversation(agent=Broken(), domain=Notes(), human=policy_human(), max_turns=1)
    result = await conversation.say("go")
    assert [o.status for o in result.outcomes] == ["done"]
    assert result.status == "turn-limit"


async def test_streamed_logs_round_trip_and_rebuild() -> None:
    agent = StreamingAgent([envelope(suggest("add-note", '{"text":"a"}')), "ok"], size=4)
    conversation = Conversation(agent=agent, domain=Notes(), human=policy_human())
    await conversation.say("go")
    entries = [entry_from_dict(entry_to_dict(entry)) for entry in conversation.log]
    assert entries == list(conversation.log)
    assert "reply-started" in [entry.event.type for entry in entries]
    rebuilt = Conversation(agent=Agent([]), domain=Notes(), human=policy_human(), log=entries)
    assert rebuilt.owed == conversation.owed


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_the_stream_parser_finds_every_element_however_the_reply_is_cut(size: int) -> None:
    reply = (
        'Sure. <dial version="0.1"><dial-inform>a &amp; b</dial-inform><!-- <dial-ask>no</dial-ask> -->'
        '<dial-suggest action="x"><dial-payload>{"k": "<&>"}</dial-payload></dial-suggest>'
        '<dial-phatic signal="typing"/></dial> after'
    ).replace('{"k": "<&>"}', '{"k": "\\u003c"}')
    parser = StreamParser()
    seen = []
    for start in range(0, len(reply), size):
        seen.extend(parser.feed(reply[start : start + size]))
    final = parser.close()
    assert final is not None
    assert seen == list(final.elements)
    assert parser.prose_before == "Sure. " and parser.prose_after() == "after"


def test_a_broken_stream_leaves_the_rest_to_the_final_parse() -> None:
    parser = StreamParser()
    seen = parser.feed("<dial><dial-inform>ok</dial-inform><dial-inform>a & b</dial-inform>")
    seen += parser.feed("<dial-inform>c</dial-inform></dial>")
    final = parser.close()
    assert final is not None
    assert [e.text for e in seen] == ["ok"]
    assert [e.text for e in final.elements] == ["ok", "a & b", "c"]


@pytest.mark.parametrize("how", ["human raises", "caller cancels"])
async def test_interruptions_of_a_streamed_turn_keep_outcomes_owed_and_raise_plainly(how: str) -> None:
    stall = Stall()

    class Person:
        async def decide(self, suggestion: Any) -> Any:
            if how == "human raises":
                raise ValueError("the UI crashed")
            await stall()

    reply = envelope(suggest("list-notes", "{}"), suggest("add-note", '{"text":"x"}'), suggest("list-notes", "{}"))
    conversation = Conversation(agent=StreamingAgent([reply], size=len(reply)), domain=Notes(), human=Person())
    if how == "human raises":
        with pytest.raises(ValueError, match="the UI crashed"):
            await conversation.say("go")
    else:
        await stall.interrupt(partial(conversation.say, "go"))
    assert [(o.id, o.status) for o in conversation.owed] == [
        ("sg-1", "done"),
        ("sg-2", "superseded"),
        ("sg-3", "superseded"),
    ]


async def test_an_empty_stream_is_an_empty_reply() -> None:
    class Mute:
        def send(self, message: str) -> str:
            raise AssertionError

        async def stream(self, message: str) -> AsyncIterator[str]:
            for chunk in ():
                yield chunk

    conversation = Conversation(agent=Mute(), domain=Notes(), human=policy_human(), timeout=None)
    result = await conversation.say("go")
    assert (result.status, result.turns) == ("idle", 1)


async def test_a_suggestion_is_put_to_the_person_only_once_its_reply_has_ended() -> None:
    """A later envelope would void the whole reply, so nothing in a reply still arriving is proposed: the person
    decides once the reply is on the log whole, with no words of it left to keep (no ``reply-progress``)."""
    first = '<dial><dial-suggest action="add-note"><dial-payload>{"text":"milk"}</dial-payload></dial-suggest>'
    second = '<dial-suggest action="add-note"><dial-payload>{"text":"oats"}</dial-payload></dial-suggest>'
    rest = "<dial-inform>more</dial-inform></dial>"
    turns: list[str] = []

    class Slow:
        def send(self, message: str) -> str:
            raise AssertionError("the runtime must stream")

        async def stream(self, message: str) -> AsyncIterator[str]:
            turns.append(message)
            if len(turns) > 1:
                yield "ok"
                return
            for chunk in (first, second, rest):
                yield chunk
                await anyio.sleep(0.01)

    at_decisions: list[list[LogEntry]] = []

    class Person:
        async def decide(self, suggestion: Any) -> Accept:
            at_decisions.append(list(conversation.log))
            return Accept()

    conversation = Conversation(agent=Slow(), domain=Notes(), human=Person())
    result = await conversation.say("go")
    assert [outcome.status for outcome in result.outcomes] == ["done", "done"]
    for logged in at_decisions:
        replies = [entry.event for entry in logged if entry.event.type == "reply"]
        assert [event.text for event in replies] == [first + second + rest]
        assert "reply-progress" not in {entry.event.type for entry in logged}
    assert history_from_log(conversation.log)[1] == ChatMessage(role="assistant", content=first + second + rest)
    assert [entry_from_dict(entry_to_dict(entry)) for entry in conversation.log] == list(conversation.log)


class EndlessAgent:
    """Streams one envelope that never ends (``inside``) or prose that never ends, then answers plainly."""

    def __init__(self, inside: bool) -> None:
        self.inside = inside
        self.sent: list[str] = []
        self.chunks = 0

    async def send(self, message: str) -> str:
        raise AssertionError("a streaming agent is streamed")

    async def stream(self, message: str) -> AsyncIterator[str]:
        self.sent.append(message)
        if len(self.sent) > 1:
            yield "<dial><dial-acknowledge>understood</dial-acknowledge></dial>"
            return
        yield "<dial><dial-inform>" if self.inside else "Well, "
        while True:
            self.chunks += 1
            yield "x" * 65536


@pytest.mark.parametrize("inside", [True, False], ids=["inside-an-envelope", "prose"])
async def test_an_endless_stream_is_cut_at_its_limit_and_the_agent_told(inside: bool) -> None:
    agent = EndlessAgent(inside)
    conversation = Conversation(agent=agent, domain=Notes(), human=policy_human())
    result = await conversation.say("go")
    assert result.status == "idle" and result.turns == 2
    limit = (8 if inside else 16) * 1024 * 1024
    assert agent.chunks * 65536 <= limit + 65536, "the stream was read past its limit"
    refused = [entry.event for entry in conversation.log if entry.event.type == "reply-refused"]
    assert len(refused) == 1 and "over the limit" in refused[0].reason
    assert 'yield="reply-1:invalid"' in agent.sent[1]


# --- deadlines --------------------------------------------------------------------------------------------------


class Trickle:
    """Streams ``head``, then ``"x"`` every ``every`` seconds forever (``every=None``: nothing more, ever); the
    second message gets ``"ok"``. Records whether the first stream was closed, as a real server's connection is."""

    def __init__(self, head: str, every: float | None) -> None:
        self.head, self.every = head, every
        self.sent: list[str] = []
        self.closed = False

    async def send(self, message: str) -> str:
        raise AssertionError("a streaming agent is streamed")

    async def stream(self, message: str) -> AsyncIterator[str]:
        self.sent.append(message)
        if len(self.sent) > 1:
            yield "<dial><dial-inform>ok</dial-inform></dial>"
            return
        try:
            yield self.head
            while True:
                if self.every is None:
                    await anyio.sleep_forever()
                await anyio.sleep(self.every)
                yield "x"
        finally:
            self.closed = True


HEAD = envelope(suggest("add-note", '{"text":"milk"}'), "<dial-inform>and then</dial-inform>")[: -len("</dial>")]
HALF = HEAD + '<dial-suggest action="add-note"><dial-payload>{"text":"br'
PROSE = "Let me think about this for a while: "

#: Each deadline: the agent's stream, the options, and how the log words the cut.
DEADLINES = {
    "idle": (HALF, None, {"idle_timeout": 0.05}, "the idle deadline passed (no text for 0.05 s)"),
    "reply": (
        HALF,
        0.01,
        {"reply_timeout": 0.2, "idle_timeout": 0.05},
        "the reply deadline passed (0.2 s since the message was sent)",
    ),
}


@pytest.mark.parametrize("name", sorted(DEADLINES))
async def test_a_reply_cut_by_a_deadline_is_handled_as_far_as_it_got_and_the_agent_told(name: str) -> None:
    head, every, options, words = DEADLINES[name]
    agent, domain = Trickle(head, every), Notes()
    conversation = Conversation(agent=agent, domain=domain, human=policy_human(), **options)
    with anyio.fail_after(5):
        result = await conversation.say("go")
    assert agent.closed, "the agent's stream was left open"
    assert domain.ran == [("add-note", {"text": "milk"})]  # the complete suggestion ran; the cut one did not
    assert [o.status for o in result.outcomes] == ["done"]
    events = [entry.event for entry in conversation.log]
    assert [e.text for e in events if e.type == "inform"] == ["and then", "ok"]
    (reply, _) = [e for e in events if e.type == "reply"]
    assert reply.text.startswith(HALF)
    (refused,) = [e for e in events if e.type == "reply-refused"]
    assert refused.reason == (
        f"the reply was cut: {words}; the elements complete by then were handled, the rest was not read"
    )
    told = agent.sent[1]  # the next message follows at once, with the outcome and why the reply was cut
    assert 'yield="reply-1:invalid"' in told and words in told and "sg-1:done" in told
    assert (result.status, result.turns) == ("idle", 2)


async def test_prose_cut_by_a_deadline_is_shown_as_far_as_it_got() -> None:
    agent = Trickle(PROSE, None)
    conversation = Conversation(agent=agent, domain=Notes(), human=policy_human(), idle_timeout=0.05, max_turns=1)
    with anyio.fail_after(5):
        result = await conversation.say("go")
    assert result.status == "turn-limit" and agent.closed
    informs = [entry.event for entry in conversation.log if entry.event.type == "inform"]
    assert [(e.text, e.element) for e in informs] == [(PROSE.strip(), -1)]
    assert [entry.event.type for entry in conversation.log].count("reply-refused") == 1


async def test_the_first_chunk_waits_for_the_shorter_of_timeout_and_reply_timeout() -> None:
    conversation = Conversation(
        agent=Stalled(), domain=Notes(), human=policy_human(), timeout=5.0, reply_timeout=0.05
    )
    with anyio.fail_after(4):
        result = await conversation.say("go")
    assert result.status == "no-reply"
    (event,) = [entry.event for entry in conversation.log if entry.event.type == "no-reply"]
    assert event.error == "The agent didn't reply within 0.05s"


class Stalled:
    """An agent that never sends its first chunk."""

    async def send(self, message: str) -> str:
        raise AssertionError("a streaming agent is streamed")

    async def stream(self, message: str) -> AsyncIterator[str]:
        await anyio.sleep_forever()
        yield ""


async def test_without_deadlines_a_slow_stream_is_read_to_its_end() -> None:
    class Slow:
        async def send(self, message: str) -> str:
            raise AssertionError

        async def stream(self, message: str) -> AsyncIterator[str]:
            for piece in ("<dial><dial-inform>", "slow", " but sure", "</dial-inform></dial>"):
                await anyio.sleep(0.02)
                yield piece

    conversation = Conversation(
        agent=Slow(), domain=Notes(), human=policy_human(), reply_timeout=None, idle_timeout=None, timeout=None
    )
    with anyio.fail_after(4):
        result = await conversation.say("go")
    assert result.status == "idle"
    assert [e.event.text for e in conversation.log if e.event.type == "inform"] == ["slow but sure"]


# --- text as it arrives -----------------------------------------------------------------------------------------

LIVE = (
    "Here is my plan. "
    + envelope(
        "<dial-inform>First, milk &amp; bread.</dial-inform>",
        suggest("add-note", '{"text":"milk"}'),
        "<dial-acknowledge>Then we see.</dial-acknowledge>",
    )
    + " That is all."
)


def shown_texts(events: list[Any]) -> list[tuple[int | None, str, str]]:
    """What a surface showed of the reply's text, in order: each element's deltas joined, then its inform."""
    shown: list[tuple[int | None, str, str]] = []
    for event in events:
        if event.type == "inform-delta":
            if shown and shown[-1][0] == event.element and shown[-1][1] == "delta":
                shown[-1] = (event.element, "delta", shown[-1][2] + event.text)
            else:
                shown.append((event.element, "delta", event.text))
        elif event.type in ("inform", "suggestion"):
            shown.append((getattr(event, "element", None), event.type, getattr(event, "text", "")))
    return shown


@pytest.mark.parametrize("size", [1, 4, 9, 1000])
async def test_text_is_shown_as_it_arrives_in_reading_order_and_completed_once(size: int) -> None:
    events: list[Any] = []
    conversation = Conversation(
        agent=StreamingAgent([LIVE, "ok"], size=size), domain=Notes(), human=policy_human(), on_event=events.append
    )
    await conversation.say("go")
    shown = shown_texts(events)
    # The text before the suggestion streams: its deltas come right before its complete inform, and add up to it
    # (a reply in one chunk shows its elements whole, but for its prose). The suggestion waits for the reply's
    # end, and what follows it shows whole after it.
    texts = [(-1, "Here is my plan."), (0, "First, milk & bread."), (2, "Then we see."), (-2, "That is all.")]
    for element, text in texts:
        at = shown.index((element, "inform", text))
        if element == -1 or (element == 0 and size < len(LIVE)):
            assert shown[at - 1] == (element, "delta", text), shown
        elif element != 0:
            assert shown[at - 1][1] != "delta", shown
    kinds = ["inform", "inform", "suggestion", "inform", "inform", "inform"]  # the last one: the next reply's
    assert [kind for _, kind, _ in shown if kind != "delta"] == kinds
    assert "inform-delta" not in {entry.event.type for entry in conversation.log}  # not on the log
    logged = [(e.event.element, e.event.text) for e in conversation.log if e.event.type == "inform"]
    assert logged == [*texts, (-1, "ok")]


async def test_text_after_a_suggestion_shows_once_the_reply_ended_and_the_person_decided() -> None:
    """An inform after a suggestion shows only after the decision (reading order), and the decision comes only
    once the reply has ended: the text before the suggestion shows while the reply is still arriving."""
    events: list[Any] = []
    release = anyio.Event()

    class Slow:
        def __init__(self) -> None:
            self.sent: list[str] = []

        async def send(self, message: str) -> str:
            raise AssertionError("the runtime must stream")

        async def stream(self, message: str) -> AsyncIterator[str]:
            self.sent.append(message)
            if len(self.sent) > 1:
                yield "<dial><dial-inform>ok</dial-inform></dial>"
                return
            yield "<dial><dial-inform>before the "
            yield "suggestion"
            with anyio.fail_after(5):
                await release.wait()
            yield '</dial-inform><dial-suggest action="add-note"><dial-payload>{"text":"a"}</dial-payload>'
            yield "</dial-suggest><dial-inform>after the decision</dial-inform></dial>"

    class Person:
        async def decide(self, suggestion: Any) -> Accept:
            assert "reply" in {entry.event.type for entry in conversation.log}
            return Accept()

    def on_event(event: Any) -> None:
        events.append(event)
        if event.type == "inform-delta" and "".join(e.text for e in events if e.type == "inform-delta").endswith(
            "suggestion"
        ):
            release.set()  # seen before the reply's end

    conversation = Conversation(agent=Slow(), domain=Notes(), human=Person(), on_event=on_event)
    with anyio.fail_after(5):
        await conversation.say("go")
    kinds = [event.type for event in events if event.type in ("outcome", "inform-delta", "inform")]
    assert kinds[:4] == ["inform-delta", "inform", "outcome", "inform"]
    assert "".join(e.text for e in events if e.type == "inform-delta") == "before the suggestion"


class SlowAppends:
    """An in-process store whose appends take ``seconds``: the call is busy writing while the agent streams on."""

    def __init__(self, seconds: float) -> None:
        self._store = open_store("memory:")
        self.seconds = seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append(self, conversation_id: str, entries: Any, *, expected_seq: int) -> None:
        await anyio.sleep(self.seconds)
        await self._store.append(conversation_id, entries, expected_seq=expected_seq)


class Flood:
    """Streams one inform of more text than the driver reads ahead, as fast as it can."""

    chunk, chunks = "x" * 10_000, 8

    def send(self, message: str) -> str:
        raise AssertionError("this agent streams")

    async def stream(self, message: str) -> AsyncIterator[str]:
        yield "<dial><dial-inform>"
        for _ in range(self.chunks):
            yield self.chunk
            await anyio.lowlevel.checkpoint()
        yield "</dial-inform></dial>"


async def test_waiting_for_a_busy_call_to_take_the_read_ahead_is_not_idle() -> None:
    """While the call is busy (a slow write) and more than the read-ahead has arrived, the reader waits; no
    deadline bounds that wait, and the idle deadline counts from its end, so the reply is read whole."""
    assert len(Flood.chunk) * Flood.chunks > READ_AHEAD
    shown: list[object] = []
    conversation = Conversation(
        agent=Flood(),
        domain=Notes(),
        human=policy_human(),
        on_event=shown.append,
        idle_timeout=0.05,
        store=SlowAppends(0.3),
        conversation_id="flood",
    )
    with anyio.fail_after(10):
        result = await conversation.say("go")
    types = [entry.event.type for entry in conversation.log]
    assert "reply-cut" not in types and "reply-refused" not in types
    (inform,) = [entry.event for entry in conversation.log if entry.event.type == "inform"]
    assert inform.text == Flood.chunk * Flood.chunks
    assert result.status == "idle"
