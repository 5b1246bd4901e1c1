"""Why a payload was refused, as an :class:`~dial_runtime.Issue` an agent can act on.

Every validator a domain may use (msgspec, JSON Schema through ``jsonschema``, pydantic) reports its first problem
here in one shape: ``code="invalid-payload"``, ``field`` the path of the offending value written the way a person
reads it (``text``, ``items[2].name``; ``None`` for the payload as a whole), and a ``hint`` that says what to send
instead (``Expected `str` of length <= 60``, ``Give `text`: it is required.``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..runtime.records import Issue

__all__ = ["INVALID_PAYLOAD", "field_path", "json_schema_issue", "msgspec_issue", "pydantic_issue"]

INVALID_PAYLOAD = "invalid-payload"
"""The code of every issue with a payload's shape."""

# msgspec's messages: "<what> - at `$.path`", or without the suffix for the payload itself.
_MSGSPEC_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MSGSPEC_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_MSGSPEC_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
# A value quoted in a hint is cut to this many characters.
_QUOTED = 40


def field_path(parts: Iterable[str | int]) -> str | None:
    """``("items", 2, "name")`` as ``items[2].name``; ``None`` for the payload itself."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or None


def _join(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


def _missing(path: str | None, name: str) -> Issue:
    return Issue(code=INVALID_PAYLOAD, field=_join(path, name), hint=f"Give `{name}`: it is required.")


def _unknown(path: str | None, name: str, known: Iterable[str] = ()) -> Issue:
    allowed = ", ".join(f"`{field}`" for field in known)
    where = f" (the fields are {allowed})" if allowed else ""
    return Issue(code=INVALID_PAYLOAD, field=_join(path, name), hint=f"Remove `{name}`: it is not a field{where}.")


def msgspec_issue(message: str, known: Iterable[str] = ()) -> Issue:
    """The issue a ``msgspec.ValidationError``'s message describes; ``known`` lists the payload's own fields,
    named in the hint when the agent sent an unknown one at the top level."""
    matched = _MSGSPEC_AT.match(message)
    assert matched is not None  # the pattern matches any text
    text, raw_path = matched["message"], matched["path"]
    # msgspec writes `$.items[2].name`; what follows `$` is already the path, less its leading dot.
    path = raw_path.lstrip(".") or None if raw_path is not None else None
    if missing := _MSGSPEC_MISSING.match(text):
        return _missing(path, missing["name"])
    if unknown := _MSGSPEC_UNKNOWN.match(text):
        return _unknown(path, unknown["name"], known if path is None else ())
    if path is None and text.startswith("Expected `object`"):
        return Issue(code=INVALID_PAYLOAD, hint=f"The payload must be a JSON object: {_lower_first(text)}.")
    return Issue(code=INVALID_PAYLOAD, field=path, hint=f"{text}.")


def pydantic_issue(errors: list[Any]) -> Issue:
    """The issue of the first error a pydantic ``ValidationError.errors()`` lists."""
    error = errors[0]
    location = [part for part in error.get("loc", ()) if isinstance(part, (str, int))]
    kind = error.get("type")
    if kind in ("missing", "extra_forbidden") and location and isinstance(location[-1], str):
        parent, name = field_path(location[:-1]), location[-1]
        return _missing(parent, name) if kind == "missing" else _unknown(parent, name)
    path = field_path(location)
    message = str(error.get("msg", "invalid value"))
    if path is None and kind in ("model_type", "model_attributes_type", "dict_type"):
        return Issue(code=INVALID_PAYLOAD, hint="The payload must be a JSON object.")
    return Issue(code=INVALID_PAYLOAD, field=path, hint=f"{message}.")


def json_schema_issue(validator: Any, instance: Any) -> Issue | None:
    """The most relevant error a ``jsonschema`` validator finds in ``instance`` (``best_match``), or ``None``."""
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(instance))
    if error is None:
        return None
    path = field_path(error.absolute_path)
    keyword, expected, value = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(value, Mapping):
        name = next((name for name in expected if name not in value), None)
        if isinstance(name, str):
            return _missing(path, name)
    if keyword in ("additionalProperties", "unevaluatedProperties") and isinstance(value, Mapping):
        known = _declared_properties(error.schema)
        patterns = [re.compile(pattern) for pattern in _mapping(error.schema.get("patternProperties"))]
        extra = [
            name for name in value if name not in known and not any(pattern.search(name) for pattern in patterns)
        ]
        if extra:
            return _unknown(path, extra[0], known)
    if path is None and keyword == "type" and expected == "object":
        return Issue(code=INVALID_PAYLOAD, hint=f"The payload must be a JSON object, got {_kind(value)}.")
    return Issue(code=INVALID_PAYLOAD, field=path, hint=_schema_hint(keyword, expected, value, error.message))


def _schema_hint(keyword: str, expected: Any, value: Any, message: str) -> str:
    """A hint in msgspec's words for the keywords a payload most often breaks, else jsonschema's own message."""
    expectations: dict[str, Callable[[], str]] = {
        "type": lambda: f"Expected `{_types(expected)}`, got `{_kind(value)}`",
        "minLength": lambda: f"Expected `string` of length >= {expected}",
        "maxLength": lambda: f"Expected `string` of length <= {expected}",
        "minimum": lambda: f"Expected a number >= {expected}",
        "maximum": lambda: f"Expected a number <= {expected}",
        "exclusiveMinimum": lambda: f"Expected a number > {expected}",
        "exclusiveMaximum": lambda: f"Expected a number < {expected}",
        "multipleOf": lambda: f"Expected a multiple of {expected}",
        "enum": lambda: f"Expected one of {_quote(expected)}",
        "const": lambda: f"Expected {_quote(expected)}",
        "pattern": lambda: f"Expected `string` matching regex {_quote(expected)}",
        "minItems": lambda: f"Expected `array` of length >= {expected}",
        "maxItems": lambda: f"Expected `array` of length <= {expected}",
        "uniqueItems": lambda: "Expected `array` without repeated items",
        "format": lambda: f"Expected `string` in the format {_quote(expected)}",
    }
    build = expectations.get(keyword)
    if build is None:
        return _cut(message) + "."
    return f"{build()}, got {_cut(_quote(value))}." if keyword != "type" else f"{build()}."


def _declared_properties(schema: Mapping[str, Any]) -> list[str]:
    return [name for name in _mapping(schema.get("properties")) if isinstance(name, str)]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _types(expected: Any) -> str:
    return " | ".join(expected) if isinstance(expected, list) else str(expected)


def _kind(value: Any) -> str:
    """The JSON type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object" if isinstance(value, Mapping) else type(value).__name__


def _quote(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _cut(text: str) -> str:
    return text if len(text) <= _QUOTED else text[: _QUOTED - 1] + "…"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
