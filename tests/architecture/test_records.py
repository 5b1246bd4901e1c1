"""Every public value record is a frozen msgspec Struct, so ``msgspec.structs.replace`` (and ``asdict``,
``fields``) work on all of them alike; the exported classes that are not records are the services listed here."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import msgspec
import pytest

import dial_runtime
import dial_runtime.agents
import dial_runtime.driver.replay
import dial_runtime.language
import dial_runtime.llm

#: Exported classes that do something rather than hold a value: agents, the conversation, the parser, the ports,
#: the domain toolkit, the codecs.
SERVICES = {
    "AnthropicAgent",
    "AnthropicToolCodec",
    "ChatAgent",
    "Conversation",
    "DialCodec",
    "Domain",
    "OnResponses",
    "Projection",
    "RecordedAgent",
    "ResponsesAgent",
    "ScriptedAgent",
    "StreamParser",
    "StructuredCodec",
    "ToolCallCodec",
}

#: The packages whose exported classes are checked: the front door and the packages its users reach into.
PACKAGES = (
    dial_runtime,
    dial_runtime.agents,
    dial_runtime.language,
    dial_runtime.llm,
    dial_runtime.driver.replay,
)

#: Records the README constructs positionally (``Edit(payload)``, ``Say(text)``); every other one is keyword-only.
POSITIONAL = {"Edit", "Say"}


def exported_classes() -> dict[str, type]:
    """Every class :data:`PACKAGES` export, exceptions aside."""
    return {
        name: value
        for module in PACKAGES
        for name in module.__all__
        if inspect.isclass(value := getattr(module, name)) and not issubclass(value, BaseException)
    }


RECORDS = sorted(name for name in exported_classes() if name not in SERVICES)


def sample(kind: Any) -> Any:
    """A value of the annotated type: the simplest one, or a record built from samples of its fields."""
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any or kind is type(None):
        return None
    if origin in (typing.Union, types.UnionType):
        return None if type(None) in arguments else sample(arguments[0])
    if origin is typing.Literal:
        return arguments[0]
    if origin is not None:
        return origin() if origin in (tuple, list, dict) else {}
    if issubclass(kind, msgspec.Struct):
        return kind(**{field.name: sample(field.type) for field in msgspec.structs.fields(kind) if field.required})
    return kind()


def test_the_records_are_the_exported_classes_that_are_not_services() -> None:
    assert set(RECORDS) >= {"SchemaIssue", "ReplayReport", "Divergence", "ChatMessage", "VocabularyEntry"}
    assert set(exported_classes()) >= SERVICES


@pytest.mark.parametrize("name", RECORDS)
def test_every_record_is_a_frozen_struct_that_replace_works_on(name: str) -> None:
    kind = exported_classes()[name]
    assert issubclass(kind, msgspec.Struct), f"{name} is not a msgspec Struct"
    assert kind.__struct_config__.frozen
    record = sample(kind)
    for field in msgspec.structs.fields(kind):
        assert msgspec.structs.replace(record, **{field.name: getattr(record, field.name)}) == record
        with pytest.raises(AttributeError):
            setattr(record, field.name, getattr(record, field.name))
    assert msgspec.structs.replace(record) == record


@pytest.mark.parametrize("name", RECORDS)
def test_records_are_keyword_only_but_the_two_the_readme_builds_positionally(name: str) -> None:
    kinds = {parameter.kind for parameter in inspect.signature(exported_classes()[name]).parameters.values()}
    expected = (
        {inspect.Parameter.POSITIONAL_OR_KEYWORD} if name in POSITIONAL else {inspect.Parameter.KEYWORD_ONLY}
    )
    assert kinds <= expected
