"""The bytes of the web surface's server-sent events: each event as ag-ui's ``EventEncoder`` writes it, whatever
its text, and a run's queued events taken all at once, none held back, none lost."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticSerializationError

from dial_runtime.web.mapping import encode_sse
from dial_runtime.web.streams import Outbox

#: Any text a string holds but a lone surrogate (which neither encoder can write in UTF-8): control characters,
#: quotes, backslashes, line and paragraph separators, characters past the Basic Multilingual Plane.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1)
ENCODER = EventEncoder()


def agui_bytes(event: BaseEvent) -> bytes:
    return ENCODER.encode(event).encode()


@given(message_id=TEXT, delta=TEXT)
def test_a_chunk_is_encoded_as_ag_ui_encodes_it(message_id: str, delta: str) -> None:
    event = TextMessageContentEvent(message_id=message_id, delta=delta)
    assert encode_sse(event) == agui_bytes(event)


@pytest.mark.parametrize(
    "delta",
    ["plain", '"quoted"', "back\\slash", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "\u2028\u2029", "é😀/</script>", " "],
)
def test_a_chunk_with_characters_json_escapes_is_encoded_as_ag_ui_encodes_it(delta: str) -> None:
    event = TextMessageContentEvent(message_id="run-1:1", delta=delta)
    assert encode_sse(event) == agui_bytes(event)


@pytest.mark.parametrize(
    "fields",
    [
        {"timestamp": 1_700_000_000_000},
        {"raw_event": {"chunk": 1}},
        {"metadata": {"unconfirmed": "no"}},
        {"subagent_run_id": "sub-1"},
        {"extra_field": [1, None]},
    ],
)
def test_a_chunk_with_an_optional_field_keeps_it(fields: dict[str, Any]) -> None:
    event = TextMessageContentEvent(message_id="m-1", delta="text", **fields)
    assert encode_sse(event) == agui_bytes(event)


@given(name=TEXT, value=st.recursive(st.none() | st.booleans() | st.integers() | TEXT, st.lists))
def test_other_events_are_encoded_as_ag_ui_encodes_them(name: str, value: Any) -> None:
    for event in [
        CustomEvent(name=name, value=value),
        TextMessageStartEvent(message_id=name, role="assistant", metadata={"question": value}),
        TextMessageEndEvent(message_id=name),
        RunStartedEvent(thread_id="t", run_id=name),
        RunFinishedEvent(thread_id="t", run_id=name, outcome=RunFinishedSuccessOutcome(), result=value),
    ]:
        assert encode_sse(event) == agui_bytes(event)


def test_a_lone_surrogate_fails_as_ag_ui_fails() -> None:
    event = TextMessageContentEvent(message_id="m-1", delta="\ud800")
    with pytest.raises(PydanticSerializationError):
        agui_bytes(event)
    with pytest.raises(PydanticSerializationError):
        encode_sse(event)


@pytest.mark.anyio
async def test_queued_events_are_taken_together_and_none_waits_for_more() -> None:
    outbox = Outbox()
    events = [TextMessageContentEvent(message_id="m-1", delta=str(n)) for n in range(3)]
    for event in events:
        outbox.put(event)
    assert await outbox.take() == events  # all that was queued, in one take
    async with anyio.create_task_group() as group:

        async def later() -> None:
            await anyio.sleep(0.01)
            outbox.put(events[0])

        group.start_soon(later)
        with anyio.fail_after(5):
            assert await outbox.take() == [events[0]]  # taken as it comes, not waiting for a second
    outbox.put(events[1])
    outbox.end()
    outbox.put(events[2])  # after the run's end: nothing is emitted any more
    assert await outbox.take() == [events[1]]  # what was queued before the end
    assert await outbox.take() == []  # then the end


@pytest.mark.anyio
async def test_a_take_with_nothing_queued_waits_until_an_event_comes() -> None:
    outbox = Outbox()
    outbox.put(TextMessageContentEvent(message_id="m-1", delta="a"))
    await outbox.take()
    with anyio.move_on_after(0.05) as waited:
        await outbox.take()  # what the first take left behind does not end this one
    assert waited.cancelled_caught


@pytest.mark.anyio
async def test_what_a_run_emits_once_its_response_stopped_reading_is_dropped() -> None:
    outbox = Outbox()
    outbox.put(TextMessageContentEvent(message_id="m-1", delta="a"))
    outbox.close()
    outbox.put(TextMessageContentEvent(message_id="m-1", delta="b"))
    outbox.end()
    assert await outbox.take() == []


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(st.integers(min_value=0, max_value=4), max_size=12),
    pauses=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_every_event_put_is_taken_once_in_order(batches: list[int], pauses: list[bool]) -> None:
    """Whatever the interleaving of a run's puts and its response's takes, the response sends every event once,
    in the order emitted, and then sees the end."""

    async def scenario() -> list[BaseEvent]:
        outbox = Outbox()
        taken: list[BaseEvent] = []

        async def run() -> None:
            for number, size in enumerate(batches):
                for index in range(size):
                    outbox.put(TextMessageContentEvent(message_id="m-1", delta=f"{number}.{index}"))
                if pauses[number]:
                    await anyio.lowlevel.checkpoint()
            outbox.end()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                while events := await outbox.take():
                    taken.extend(events)
        return taken

    expected = [f"{number}.{index}" for number, size in enumerate(batches) for index in range(size)]
    for backend in ("asyncio", "trio"):
        taken = anyio.run(scenario, backend=backend)
        assert [event.delta for event in taken] == expected  # type: ignore[attr-defined]
