"""The bytes of the web surface's server-sent events: each event as ag-ui's ``EventEncoder`` writes it, whatever
its text, and a run's queued events taken all at once, none held back."""

from __future__ import annotations

import math
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
from hypothesis import given
from hypothesis import strategies as st
from pydantic_core import PydanticSerializationError

from dial_runtime.web.app import _queued
from dial_runtime.web.mapping import encode_sse

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
    sender, receiver = anyio.create_memory_object_stream[BaseEvent](math.inf)
    events = [TextMessageContentEvent(message_id="m-1", delta=str(n)) for n in range(3)]
    async with receiver:
        for event in events:
            sender.send_nowait(event)
        assert await _queued(receiver) == events  # all that was queued, in one take
        async with anyio.create_task_group() as group:

            async def later() -> None:
                await anyio.sleep(0.01)
                sender.send_nowait(events[0])

            group.start_soon(later)
            with anyio.fail_after(5):
                assert await _queued(receiver) == [events[0]]  # taken as it comes, not waiting for a second
        sender.send_nowait(events[1])
        sender.close()
        assert await _queued(receiver) == [events[1]]  # what was queued before the end
        assert await _queued(receiver) == []  # then the end
