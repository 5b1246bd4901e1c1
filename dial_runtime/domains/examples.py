"""An example payload built from a JSON Schema, meant to pass that schema: the agent copies its shape.

The example honours what a payload most often has to meet: required properties, ``enum``/``const``/``default``/
``examples`` (and OpenAPI's ``example``), string lengths and common formats, numeric bounds and ``multipleOf``,
array lengths, ``anyOf``/``oneOf`` (the first branch that is not ``null``) and local ``$ref``s. A schema it cannot
satisfy (a ``pattern``, say) gives an example the action's own validation refuses; callers that can validate check
it and leave such an example out. It is the one example builder: typed domains, MCP tools and the system prompt
(for a plain domain's schema) all use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["example_from_schema"]

_DEPTH = 8
_FORMATS = {
    "date-time": "2026-01-01T09:00:00Z",
    "date": "2026-01-01",
    "time": "09:00:00Z",
    "email": "ada@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "duration": "P1D",
}
_WORD = "example"


def example_from_schema(schema: Mapping[str, Any]) -> Any:
    """A payload shaped like ``schema`` (see the module docstring)."""
    return _example(schema, schema, _DEPTH)


def _resolve(root: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/"):
        target: Any = root
        for part in reference[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        if isinstance(target, Mapping):
            return target
    return schema


def _example(root: Mapping[str, Any], schema: Mapping[str, Any], depth: int) -> Any:
    schema = _resolve(root, schema)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if "example" in schema:
        return schema["example"]
    for key in ("examples", "enum"):
        values = schema.get(key)
        if isinstance(values, list) and values:
            return values[0]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = [b for b in schema.get(key) or () if isinstance(b, Mapping)]
        chosen = next((b for b in branches if _resolve(root, b).get("type") != "null"), None)
        if chosen is not None:
            return _example(root, chosen, depth)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if depth <= 0 or kind == "null":
        return None
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = [name for name in schema.get("required") or () if isinstance(name, str)]
        return {
            name: _example(root, properties.get(name) or {}, depth - 1)
            for name in required or list(properties)
            if isinstance(properties.get(name) or {}, Mapping)
        }
    if kind == "array":
        items = schema.get("items")
        count = max(int(schema.get("minItems", 1)), 0) if isinstance(items, Mapping) else 0
        return [_example(root, items, depth - 1) for _ in range(count)] if isinstance(items, Mapping) else []
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return False
    return _string(schema)


def _string(schema: Mapping[str, Any]) -> str:
    text = _FORMATS.get(str(schema.get("format")), _WORD)
    shortest, longest = int(schema.get("minLength", 0)), schema.get("maxLength")
    if len(text) < shortest:
        text += "x" * (shortest - len(text))
    if isinstance(longest, int):
        text = text[:longest]
    return text


def _number(schema: Mapping[str, Any], integer: bool) -> int | float:
    low, high = schema.get("minimum"), schema.get("maximum")
    above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    value: float = 1
    if isinstance(low, (int, float)):
        value = max(value, low)
    if isinstance(above, (int, float)) and value <= above:
        value = math.floor(above) + 1 if integer else above + 1
    if isinstance(high, (int, float)):
        value = min(value, high)
    if isinstance(below, (int, float)) and value >= below:
        value = math.ceil(below) - 1 if integer else below - 1
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and step > 0:
        value = math.ceil(value / step) * step
    return int(value) if integer else value
