"""Every answer the driver gives the core is on the log, so a replay feeds the log back and infers nothing; a log
written before an answer was logged reads, through the one upgrade step, as this version writes it."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from dial_runtime import ActionSpec, ApprovalPolicy, Conversation, LogEntry, replay, scripted_human
from dial_runtime.demo import NotesDomain
from dial_runtime.runtime.events import ActionStartedEvent, Event, SentEvent
from dial_runtime.runtime.upgrade import upgraded
from dial_runtime.stores import MemoryStore
from dial_runtime.views.answers import comparable, same_events

from ..fakes import Agent, StreamingAgent, envelope, suggest
from .test_replay import record_crashes, record_deferred, record_demo, record_failures
from .test_replay_edges import ENDINGS, hold

DROP = envelope(suggest("drop-table", '{"table": "users"}'))
ACK = envelope("<dial-acknowledge>ok</dial-acknowledge>")
INFORMS_THEN_A_SECOND_ENVELOPE = (
    "<dial><dial-inform>First.</dial-inform><dial-inform>Second.</dial-inform>"
    + suggest("add-note", '{"text":"milk"}')
    + "</dial> and <dial><dial-inform>again</dial-inform></dial>"
)


class Ops:
    """An action with a deadline (``deadline`` seconds), a reminder and an escalation, none of them whole
    seconds."""

    def __init__(self, deadline: float) -> None:
        self.actions = {
            "drop-table": ActionSpec(
                mutates=True,
                policy=ApprovalPolicy(roles=frozenset({"dba"})),
                remind_after=0.1,
                escalate_after=0.7,
                escalate_to=frozenset({"cto"}),
                deadline=deadline,
            )
        }

    def run(self, action: str, payload: Any) -> Any:
        return None


async def _waiting_on_a_deadline(now: float, deadline: float = 3600.3) -> list[LogEntry]:
    conversation = await Conversation.open(
        MemoryStore(),
        "c-1",
        agent=Agent([DROP, ACK]),
        domain=Ops(deadline),
        human=scripted_human(["defer"]),
        clock=lambda: now,
    )
    await conversation.say("drop users", by="ada")
    return list(conversation.log)


async def _streamed(size: int) -> list[LogEntry]:
    agent = StreamingAgent(
        [INFORMS_THEN_A_SECOND_ENVELOPE, "<dial><dial-inform>ok</dial-inform></dial>"], size=size
    )
    conversation = Conversation(agent=agent, domain=NotesDomain(), human=scripted_human(["accept"]))
    await conversation.say("add milk")
    return list(conversation.log)


def _first(entries: list[LogEntry], kind: str) -> Any:
    return next(entry.event for entry in entries if entry.event.type == kind)


def written_before(entries: list[LogEntry]) -> list[LogEntry]:
    """``entries`` as a version that did not log the answers wrote them: no ``trigger`` on outcomes, no context
    span, no seconds on suggestions and no-replies, no ``handled_at``, and no ``reply-cut`` for a deadline."""
    cleared: dict[str, dict[str, Any]] = {
        "outcome": {"trigger": None},
        "sent": {"context": None},
        "suggestion": {"deadline_after": None, "remind_after": None, "escalate_after": None},
        "no-reply": {"seconds": None, "call": False},
        "reply": {"handled_at": None},
    }
    old: list[LogEntry] = []
    for entry in entries:
        event: Event = entry.event
        if event.type == "reply-cut" and getattr(event, "cause", "").endswith("deadline"):
            continue
        if event.type in cleared:
            event = msgspec.structs.replace(event, **cleared[event.type])
        old.append(LogEntry(seq=len(old) + 1, time=entry.time, event=event))
    return old


def _as_compared(entries: list[LogEntry]) -> list[Event]:
    """The events of ``entries`` as an upgraded log must match a new one: a streamed reply without
    ``handled_at`` (the upgrade finds where its informs were complete, not where the chunk that completed them
    ended: the same pieces for a replay, not always the same number), and a suggestion without the seconds of
    its times once they give those times exactly (many floats do, added to the time it was shown)."""
    found: list[Event] = []
    for entry in entries:
        event: Any = entry.event
        if event.type == "reply":
            event = msgspec.structs.replace(event, handled_at=None)
        elif event.type == "suggestion":
            for at, after in (
                ("deadline", "deadline_after"),
                ("remind_at", "remind_after"),
                ("escalate_at", "escalate_after"),
            ):
                seconds = getattr(event, after)
                assert (getattr(event, at) is None) == (seconds is None)
                assert seconds is None or entry.time + seconds == getattr(event, at)
            event = msgspec.structs.replace(event, deadline_after=None, remind_after=None, escalate_after=None)
        found.append(event)
    return found


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}


LOGS = {
    "demo": record_demo,
    "deferred": record_deferred,
    "failures": record_failures,
    "crashes": record_crashes,
    "deadline-reminder-escalation": lambda: _waiting_on_a_deadline(1_800_000_000.1),
    "streamed-informs-then-a-second-envelope": lambda: _streamed(5),
    **{f"{name}-streamed": (lambda name=name: hold(name, streamed=True)) for name in ENDINGS},
    **{name: (lambda name=name: hold(name, streamed=False)) for name in ENDINGS},
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(LOGS))
async def test_a_log_this_version_writes_passes_the_upgrade_unchanged_and_replays(name: str) -> None:
    entries = list(await LOGS[name]())
    assert upgraded(entries) == entries
    report = replay(entries, domain=NotesDomain())
    assert report.ok, str(report)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(LOGS))
async def test_a_log_written_before_the_answers_were_logged_reads_as_this_version_writes_it(name: str) -> None:
    entries = list(await LOGS[name]())
    old = written_before(entries)
    assert _as_compared(upgraded(old)) == _as_compared(entries)
    report = replay(old, domain=NotesDomain())
    assert report.ok, str(report)


@pytest.mark.anyio
async def test_each_answer_is_on_the_log() -> None:
    demo = list(await record_demo())
    sent = _first(demo, "sent")
    start, end = sent.context
    assert sent.message[start:end] == NotesDomain().context()
    failures = list(await record_failures())
    no_reply = _first(failures, "no-reply")
    assert (no_reply.seconds, no_reply.call) == (0.05, False)
    waiting = await _waiting_on_a_deadline(1_800_000_000.1)
    shown = _first(waiting, "suggestion")
    assert (shown.deadline_after, shown.remind_after, shown.escalate_after) == (3600.3, 0.1, 0.7)
    cut = _first(await hold("cut-while-streaming-by-the-idle-deadline", streamed=True), "reply-cut")
    assert (cut.cause, cut.seconds) == ("idle-deadline", 30.0)
    reply = _first(await _streamed(5), "reply")
    assert reply.handled_at is not None and reply.text[: reply.handled_at].count("</dial-inform>") == 2


@given(
    now=st.floats(min_value=1e8, max_value=4e9, allow_nan=False),
    seconds=st.floats(min_value=1e-3, max_value=1e7, allow_nan=False),
)
@settings(max_examples=60, deadline=None)
def test_the_upgrade_recovers_the_seconds_a_deadline_was_given_in(now: float, seconds: float) -> None:
    entries = anyio.run(_waiting_on_a_deadline, now, seconds, backend="trio")
    shown = _first(upgraded(written_before(entries)), "suggestion")
    assert shown.deadline_after is not None and now + shown.deadline_after == now + seconds
    assert replay(written_before(entries)).ok


@given(size=st.integers(min_value=1, max_value=len(INFORMS_THEN_A_SECOND_ENVELOPE) + 1))
@settings(max_examples=40, deadline=None)
def test_a_streamed_reply_replays_identical_however_it_was_chunked(size: int) -> None:
    entries = anyio.run(_streamed, size, backend="trio")
    report = replay(entries, domain=NotesDomain())
    assert report.ok, str(report)
    report = replay(written_before(entries), domain=NotesDomain())
    assert report.ok, str(report)


SENT = SentEvent(turn=1, message="hello", message_id="c/reply-1")
STARTED = ActionStartedEvent(
    suggestion_id="sg-1", action="add-note", payload={"text": "milk"}, preview="p", key="k1"
)


@pytest.mark.parametrize(
    ("recorded", "replayed", "with_ids", "with_keys", "same"),
    [
        ([SENT, STARTED], [SENT, STARTED], True, True, True),
        ([SENT], [msgspec.structs.replace(SENT, message_id=None)], False, False, True),
        ([SENT], [msgspec.structs.replace(SENT, message_id=None)], True, True, False),
        ([STARTED], [msgspec.structs.replace(STARTED, key=None)], True, False, True),
        ([STARTED], [msgspec.structs.replace(STARTED, key=None)], True, True, False),
        ([SENT], [msgspec.structs.replace(SENT, message="hello!", message_id=None)], False, False, False),
        ([STARTED], [msgspec.structs.replace(STARTED, payload={"text": "eggs"}, key=None)], True, False, False),
        ([SENT, STARTED], [SENT], True, True, False),
        ([SENT, STARTED], [STARTED, SENT], True, True, False),
    ],
)
def test_the_quick_comparison_finds_the_same_call_only_where_the_full_one_finds_no_difference(
    recorded: list[Event], replayed: list[Event], with_ids: bool, with_keys: bool, same: bool
) -> None:
    assert same_events(recorded, replayed, with_ids=with_ids, with_keys=with_keys) is same
    as_compared = [
        [comparable(event, with_ids=with_ids, with_keys=with_keys) for event in side]
        for side in (recorded, replayed)
    ]
    assert (as_compared[0] == as_compared[1]) is same
