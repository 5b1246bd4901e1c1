"""What real models do to the guarantees: replies small models were seen to write, and what each must come to."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dial_runtime import Accept, Conversation, policy_human, replay
from dial_runtime.language.parser import envelope_candidates, parse
from dial_runtime.terminal.transcript import Transcript
from dial_runtime.views.person import AgentText, project

from ..fakes import Agent, Notes, StreamingAgent, envelope, suggest

pytestmark = pytest.mark.anyio

REMOVE = envelope(suggest("remove-note", '{"text":"call mom"}'))
ADD = envelope(suggest("add-note", '{"text":"buy milk"}'))
OK = "<dial><dial-inform>ok</dial-inform></dial>"


class Accepting:
    """A person who accepts every suggestion, and keeps what they were shown."""

    def __init__(self) -> None:
        self.shown: list[Any] = []

    def decide(self, suggestion: Any) -> Accept:
        self.shown.append(suggestion)
        return Accept()


def agent(streamed: bool, replies: list[str]) -> Agent:
    return StreamingAgent(replies, size=7) if streamed else Agent(replies)


# --- 1. an example becomes the envelope -------------------------------------------------------------------------

SEVERAL = {
    "a-fenced-example-then-the-real-one": (
        "Replies use this format, for example:\n```xml\n" + REMOVE + "\n```\nSo here is mine:\n" + ADD
    ),
    "an-example-quoted-in-prose": "An envelope looks like " + REMOVE.replace("\n", "") + ". Mine: " + ADD,
    "the-real-one-then-an-example": ADD + "\n\nNext time you could write " + REMOVE,
}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("reply", list(SEVERAL.values()), ids=list(SEVERAL))
async def test_a_reply_with_several_envelopes_proposes_nothing_and_asks_for_one(
    reply: str, streamed: bool
) -> None:
    domain, person = Notes(), Accepting()
    talker = agent(streamed, [reply, OK])
    conversation = Conversation(agent=talker, domain=domain, human=person)
    result = await conversation.say("tidy my notes")
    assert domain.ran == [] and person.shown == []
    kinds = {entry.event.type for entry in conversation.log}
    assert not kinds & {"proposed", "suggestion", "action-started"}
    (refused,) = [entry.event for entry in conversation.log if entry.event.type == "reply-refused"]
    assert "holds 2 <dial> envelopes" in refused.reason and "send exactly one envelope" in refused.reason
    assert "holds 2 &lt;dial&gt; envelopes" in talker.sent[1] and 'yield="reply-1:invalid"' in talker.sent[1]
    shown = [entry.event.text for entry in conversation.log if entry.event.type == "inform"]
    assert not any("<dial" in text for text in shown), "raw XML reached the person"
    assert result.status == "idle"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    "reply",
    [
        "Here:\n```xml\n" + ADD + "\n```",
        ADD,
        "Write one `<dial>` envelope; " + ADD,
        "One <dial> envelope:\n" + ADD,
    ],
    ids=["fenced", "bare", "named-in-inline-code", "named-in-prose"],
)
async def test_one_envelope_fenced_or_not_is_proposed(reply: str, streamed: bool) -> None:
    domain = Notes()
    conversation = Conversation(agent=agent(streamed, [reply, OK]), domain=domain, human=policy_human())
    await conversation.say("add milk")
    assert domain.ran == [("add-note", {"text": "buy milk"})]


PROSE = st.text(alphabet=st.sampled_from("ab \n.:`"), max_size=12)
ACTS = st.sampled_from([REMOVE, ADD, envelope("<dial-inform>hi</dial-inform>")])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(st.tuples(PROSE, ACTS, st.booleans()), min_size=1, max_size=4),
    tail=PROSE,
)
def test_every_envelope_with_content_anywhere_in_prose_is_counted(
    pieces: list[tuple[str, str, bool]], tail: str
) -> None:
    reply = ""
    for prose, act, fenced in pieces:
        # A fence opens on a line of its own; prose never leaves an inline code span open across an envelope.
        prose = prose.replace("`", "")
        reply += prose + ("\n```xml\n" + act + "\n```\n" if fenced else act)
    assert envelope_candidates(reply + tail.replace("`", "")) == len(pieces)


# --- 5. text after inline markup --------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("Buy <b>milk</b> today", "Buy milk today"),
        ("<em>Now</em>: <code>ls -l</code> lists <i>all <b>the</b></i> files", "Now: ls -l lists all the files"),
        ("Keep <br/>going", "Keep going"),
        ('Total <span class="n">3</span>', "Total 3"),
    ],
    ids=["bold", "nested", "empty", "attributes"],
)
async def test_inline_markup_is_read_as_its_text(body: str, text: str, streamed: bool) -> None:
    events: list[Any] = []
    reply = f"<dial><dial-inform>{body}</dial-inform></dial>"
    conversation = Conversation(
        agent=agent(streamed, [reply]), domain=Notes(), human=policy_human(), on_event=events.append
    )
    await conversation.say("what now?")
    assert [entry.event.text for entry in conversation.log if entry.event.type == "inform"] == [text]
    deltas = "".join(event.text for event in events if event.type == "inform-delta")
    assert text.startswith(deltas), "the text shown as it arrived is not the start of the inform"


def test_a_speech_act_inside_text_is_not_read_as_text() -> None:
    found = parse("<dial><dial-inform>a <b><dial-ask>no?</dial-ask></b> c</dial-inform></dial>")
    assert found is not None and found.elements[0].text == "a  c"


# --- 4. invented outcomes ---------------------------------------------------------------------------------------


def acknowledge(of: str, claim: str, text: str = "Done: the note is gone.") -> str:
    return f'<dial><dial-acknowledge of="{of}" yield="{claim}">{text}</dial-acknowledge></dial>'


@pytest.mark.parametrize(
    ("first", "claim", "why"),
    [
        (None, acknowledge("sg-3", "sg-3:done"), "this conversation has no 'sg-3'"),
        (ADD, acknowledge("sg-1", "sg-1:done"), None),
        (ADD, acknowledge("sg-1", "sg-1:failed"), "sg-1 ended done, not failed"),
        (ADD, acknowledge("reply-1", "sg-7:done"), "this conversation has no suggestion 'sg-7'"),
    ],
    ids=["unknown-id", "true", "another-status", "unknown-claim"],
)
async def test_an_acknowledgement_that_contradicts_the_log_is_marked_and_the_agent_told(
    first: str | None, claim: str, why: str | None
) -> None:
    replies = [first, claim, OK] if first is not None else [claim, OK]
    talker = Agent(replies)
    conversation = Conversation(agent=talker, domain=Notes(), human=policy_human())
    await conversation.say("remove 'call mom'")
    if why is not None:
        await conversation.say("and?")
    (text,) = [
        item
        for item in project(conversation.log).items
        if isinstance(item, AgentText) and item.act == "acknowledge"
    ]
    assert text.unconfirmed == why
    lines: list[str] = []
    transcript = Transcript(write=lines.append)
    for entry in conversation.log:
        transcript.show(entry.event)
    (shown,) = [line for line in lines if "the note is gone" in line]
    if why is None:
        assert shown == "agent: Done: the note is gone."
    else:
        assert shown == f"agent (not confirmed by the runtime: {why}): Done: the note is gone."
        told = talker.sent[-1]
        assert "not confirmed" in told and why.replace("'", "&apos;") in told.replace("'", "&apos;")


@pytest.mark.parametrize("size", [1, 3, 5, 17, 40, 10_000])
async def test_a_streamed_reply_with_two_envelopes_replays_as_it_was_shown(size: int) -> None:
    """Chunked finely, the example's inform is shown before the second envelope arrives and voids the reply;
    chunked coarsely, it is not. Either way the log replays identical: replay feeds the reply as the recording
    shows it was shown."""
    example = envelope("<dial-inform>An example.</dial-inform>", "<dial-inform>Two.</dial-inform>")
    reply = example + "\n\nAnd the real one:\n" + envelope(suggest("add-note", '{"text":"milk"}'))
    agent = StreamingAgent([reply, envelope("<dial-acknowledge>Sorry.</dial-acknowledge>")], size=size)
    conversation = Conversation(agent=agent, domain=Notes(), human=policy_human("accept"))
    await conversation.say("go")
    report = replay(conversation.log)
    assert report.ok, report.divergences
    assert not [entry for entry in conversation.log if entry.event.type == "suggestion"]
