"""The one example builder, ``example_from_schema``: the payload an action's schema documents for the agent,
built to pass that schema where it can (typed domains, MCP tools and the system prompt all show it)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from dial_runtime import system_prompt
from dial_runtime.agents.prompt import vocabulary
from dial_runtime.domains import SchemaPayload, example_from_schema

DATE = {"type": "string", "format": "date"}

#: A schema, the example built from it, and whether that example passes the schema (it cannot meet a pattern).
RULES: dict[str, tuple[dict[str, Any], Any, bool]] = {
    "const first": ({"const": "x", "default": "y", "examples": ["z"]}, "x", True),
    "then default": ({"type": "integer", "default": 10, "examples": [3]}, 10, True),
    "then OpenAPI's example": ({"type": "integer", "example": 4, "examples": [3]}, 4, True),
    "then the first of examples": ({"type": "string", "examples": ["a", "b"]}, "a", True),
    "then the first of enum": ({"enum": ["open", "closed"]}, "open", True),
    "a string is a word": ({"type": "string"}, "example", True),
    "no type is a string": ({}, "example", True),
    "a format gets its form": (DATE, "2026-01-01", True),
    "an email": ({"type": "string", "format": "email"}, "ada@example.com", True),
    "minLength pads": ({"type": "string", "minLength": 10}, "examplexxx", True),
    "maxLength cuts": ({"type": "string", "maxLength": 3}, "exa", True),
    "a pattern is not met": ({"type": "string", "pattern": "^[0-9]{4}$"}, "example", False),
    "a number is 1": ({"type": "number"}, 1, True),
    "an integer within bounds": ({"type": "integer", "minimum": 5, "maximum": 9}, 5, True),
    "above an exclusive minimum": ({"type": "integer", "exclusiveMinimum": 5}, 6, True),
    "below an exclusive maximum": ({"type": "number", "exclusiveMaximum": 0.5}, -0.5, True),
    "a multiple": ({"type": "integer", "minimum": 5, "multipleOf": 4}, 8, True),
    "a boolean is false": ({"type": "boolean"}, False, True),
    "null": ({"type": "null"}, None, True),
    "a nullable type is its other type": ({"type": ["null", "boolean"]}, False, True),
    "an array has one item": ({"type": "array", "items": {"type": "string"}}, ["example"], True),
    "or minItems of them": ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [1, 1], True),
    "an array without items is empty": ({"type": "array"}, [], True),
    "an object has its required properties": (
        {"type": "object", "properties": {"a": {"type": "string"}, "b": DATE}, "required": ["b"]},
        {"b": "2026-01-01"},
        True,
    ),
    "or all of them when none is required": (
        {"properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}},
        {"a": 1, "b": False},
        True,
    ),
    "anyOf takes the first branch that is not null": (
        {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 3}]},
        3,
        True,
    ),
    "a local $ref is followed": (
        {"type": "object", "properties": {"at": {"$ref": "#/$defs/when"}}, "$defs": {"when": DATE}},
        {"at": "2026-01-01"},
        True,
    ),
    "a schema that nests itself stops at depth 8": (
        {"$ref": "#/$defs/node", "$defs": {"node": {"properties": {"next": {"$ref": "#/$defs/node"}}}}},
        {"next": {"next": {"next": {"next": {"next": {"next": {"next": {"next": None}}}}}}}},
        True,
    ),
}


@pytest.mark.parametrize("name", list(RULES))
def test_each_rule_of_the_example_builder(name: str) -> None:
    schema, expected, passes = RULES[name]
    example = example_from_schema(schema)
    assert example == expected and type(example) is type(expected)
    assert (SchemaPayload(schema).issue(example) is None) == passes, SchemaPayload(schema).issue(example)


class Plain:
    """A domain that is not a typed Domain: a schema in its vocabulary and no example."""

    actions: ClassVar[dict[str, Any]] = {"plan": {"mutates": True}}
    vocabulary: ClassVar[dict[str, Any]] = {"plan": {"schema": RULES["an object has its required properties"][0]}}

    def run(self, action: str, payload: Any) -> None:
        return None


def test_the_system_prompt_shows_the_same_example_for_a_plain_domains_schema() -> None:
    (entry,) = vocabulary(Plain())
    assert entry.example == {"b": "2026-01-01"}
    assert '{"b":"2026-01-01"}' in system_prompt(Plain())
