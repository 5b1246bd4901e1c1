"""The runtime decides what to do with every speech act the schema defines, and with nothing else."""

from __future__ import annotations

from dial_runtime.language.schema import speech_acts
from dial_runtime.runtime import HANDLED_ELEMENTS


def test_the_turn_loop_handles_exactly_the_schemas_speech_acts() -> None:
    assert speech_acts() == HANDLED_ELEMENTS
