"""The runtime decides what to do with every speech act the schema defines, and with nothing else."""

from __future__ import annotations

from dial_runtime.language.acts import ACT_NAMES, ELEMENT_TYPES, SPEECH_ACTS
from dial_runtime.language.schema import speech_acts
from dial_runtime.runtime import HANDLED_ELEMENTS


def test_the_turn_loop_handles_exactly_the_schemas_speech_acts() -> None:
    assert speech_acts() == HANDLED_ELEMENTS


def test_the_registry_holds_exactly_the_schemas_speech_acts() -> None:
    assert frozenset(SPEECH_ACTS) == speech_acts()
    assert frozenset(ACT_NAMES) == frozenset(ELEMENT_TYPES) == speech_acts()


def test_each_act_reads_into_the_record_of_its_name() -> None:
    for name, act in SPEECH_ACTS.items():
        assert act.record().type == name
        fields = set(act.record.__struct_fields__)
        assert {field for field, _ in act.attributes.values()} <= fields
