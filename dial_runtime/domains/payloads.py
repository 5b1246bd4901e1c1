"""The payload of a typed action: how it is validated, what its JSON Schema is, what the function receives.

An action's payload takes one of four forms, chosen once when the action is declared:

- :class:`KeywordPayload`: the function's keyword parameters, typed by their annotations (``msgspec.Meta``
  constraints included), made into one msgspec ``Struct`` with ``forbid_unknown_fields=True``;
- :class:`StructPayload`: the function's one parameter is a ``msgspec.Struct``;
- :class:`PydanticPayload`: the function's one parameter is a pydantic model (when pydantic is installed);
- :class:`SchemaPayload`: a JSON Schema dict (``@domain.action(schema=...)``); the function's one parameter gets
  the payload as JSON data.

msgspec validates in strict mode (no ``"1"`` for an ``int``), pydantic in strict JSON mode; both reject unknown
fields at the top level unless a pydantic model's ``model_config`` says otherwise (a nested ``Struct`` follows
its own ``forbid_unknown_fields``). A JSON Schema is honoured as written: add ``"additionalProperties": false``
to reject unknown fields. A JSON Schema and the payloads it validates nest at most :data:`MAX_DEPTH` objects and
arrays deep: ``jsonschema`` recurses once per level, so deeper ones would exhaust Python's stack.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec

from ..runtime.records import Issue
from .issues import json_schema_issue, msgspec_issue, pydantic_issue

__all__ = [
    "MAX_DEPTH",
    "KeywordPayload",
    "Payload",
    "PydanticPayload",
    "SchemaPayload",
    "StructPayload",
    "payload_of",
]

#: How deep a JSON Schema, and a payload validated against one, may nest objects and arrays.
MAX_DEPTH = 64


class Payload(Protocol):
    """What a typed action knows of its payload."""

    @property
    def schema(self) -> dict[str, Any]:
        """The payload's JSON Schema (self-contained: shared definitions under ``$defs``)."""

    def convert(self, payload: Any) -> dict[str, Any] | Issue:
        """The function's keyword arguments for a valid ``payload``, else the :class:`Issue` with it."""


def _self_contained(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec's ``{"$ref": "#/$defs/X", "$defs": {...}}`` with ``X`` itself at the top, untitled."""
    reference = schema.get("$ref")
    definitions = dict(schema.get("$defs", {}))
    if not isinstance(reference, str) or not reference.startswith("#/$defs/"):
        return schema
    top = dict(definitions.pop(reference.removeprefix("#/$defs/")))
    top.pop("title", None)
    if definitions:
        top["$defs"] = definitions
    return top


def _last_line(error: Exception) -> str:
    """The gist of a msgspec error, whose message may explain itself over several lines."""
    return str(error).strip().splitlines()[-1]


class KeywordPayload:
    """The keyword parameters of a function, as one msgspec ``Struct`` built when the action is declared."""

    def __init__(self, action: str, name: str, parameters: list[tuple[str, Any, Any]]) -> None:
        fields = [
            (field, kind) if default is _REQUIRED else (field, kind, default)
            for field, kind, default in parameters
        ]
        try:
            self.type: type[msgspec.Struct] = msgspec.defstruct(
                name, fields, forbid_unknown_fields=True, kw_only=True
            )
            self._schema = _self_contained(msgspec.json.schema(self.type))
        except (TypeError, ValueError) as error:  # a type msgspec cannot validate or describe
            raise TypeError(f"action {action}: {_last_line(error)}") from None
        self._fields = tuple(field for field, _, _ in parameters)

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    def convert(self, payload: Any) -> dict[str, Any] | Issue:
        try:
            value = msgspec.convert(payload, self.type, strict=True)
        except msgspec.ValidationError as error:
            return msgspec_issue(str(error), self._fields)
        return msgspec.structs.asdict(value)


class StructPayload:
    """One ``msgspec.Struct`` parameter; unknown fields are rejected at its top level."""

    def __init__(self, parameter: str, struct: type[msgspec.Struct]) -> None:
        self.parameter = parameter
        self.struct = struct
        self.type: type[msgspec.Struct] = type(struct.__name__, (struct,), {}, forbid_unknown_fields=True)
        try:
            self._schema = _self_contained(msgspec.json.schema(self.type))
        except (TypeError, ValueError) as error:
            raise TypeError(f"{struct.__name__}: {_last_line(error)}") from None
        self._fields = struct.__struct_fields__

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    def convert(self, payload: Any) -> dict[str, Any] | Issue:
        try:
            return {self.parameter: msgspec.convert(payload, self.type, strict=True)}
        except msgspec.ValidationError as error:
            return msgspec_issue(str(error), self._fields)


class PydanticPayload:
    """One pydantic model parameter, validated in strict JSON mode; unknown fields are rejected unless the
    model's ``model_config`` sets ``extra`` itself."""

    def __init__(self, parameter: str, model: Any) -> None:
        self.parameter = parameter
        self.model = model
        self._extra = None if "extra" in model.model_config else "forbid"
        self._schema: dict[str, Any] = model.model_json_schema()

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    def convert(self, payload: Any) -> dict[str, Any] | Issue:
        from pydantic import ValidationError

        try:
            data = msgspec.json.encode(payload)
        except (TypeError, OverflowError):
            data = b"null"  # not JSON data at all: let the model say what it expected
        try:
            return {self.parameter: self.model.model_validate_json(data, strict=True, extra=self._extra)}
        except ValidationError as error:
            return pydantic_issue(error.errors())


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (JSON data) nests objects and arrays more than ``limit`` deep; looked at without
    recursion, so any depth can be asked about."""
    waiting: list[tuple[Any, int]] = [(value, 0)]
    while waiting:
        item, depth = waiting.pop()
        if isinstance(item, Mapping):
            inner: Any = item.values()
        elif isinstance(item, (list, tuple)):
            inner = item
        else:
            continue
        if depth == limit:
            return True
        waiting.extend((each, depth + 1) for each in inner)
    return False


_TOO_DEEP = f"the JSON Schema nests objects and arrays more than {MAX_DEPTH} deep (the most supported)"


class SchemaPayload:
    """A JSON Schema, checked when declared and validated with ``jsonschema`` (formats included); ``ValueError``
    for a schema that is not valid or nests deeper than :data:`MAX_DEPTH`, and a payload that nests deeper is
    refused with the issue ``too-deep``."""

    def __init__(self, schema: Mapping[str, Any], parameter: str | None = None) -> None:
        try:
            from jsonschema import validators
            from jsonschema.exceptions import SchemaError
        except ImportError:
            raise ImportError(
                "a JSON Schema payload needs the jsonschema package: pip install 'dial-runtime[schema]'"
            ) from None
        self.parameter = parameter
        self._schema = dict(schema)
        if _deeper_than(self._schema, MAX_DEPTH):
            raise ValueError(_TOO_DEEP)
        validator_class = validators.validator_for(self._schema)
        try:
            validator_class.check_schema(self._schema)
        except SchemaError as error:
            raise ValueError(f"not a valid JSON Schema: {error.message}") from None
        except RecursionError:  # within MAX_DEPTH, but called with little of the stack left
            raise ValueError(_TOO_DEEP) from None
        self._validator = validator_class(self._schema, format_checker=validator_class.FORMAT_CHECKER)

    @property
    def schema(self) -> dict[str, Any]:
        return self._schema

    def issue(self, payload: Any) -> Issue | None:
        """The issue with ``payload``, or ``None`` when it is valid."""
        too_deep = Issue(code="too-deep", hint=f"Nest the payload's objects and arrays at most {MAX_DEPTH} deep.")
        if _deeper_than(payload, MAX_DEPTH):
            return too_deep
        try:
            return json_schema_issue(self._validator, payload)
        except RecursionError:  # a schema whose references recurse, met with little of the stack left
            return too_deep

    def convert(self, payload: Any) -> dict[str, Any] | Issue:
        issue = self.issue(payload)
        if issue is not None:
            return issue
        return {} if self.parameter is None else {self.parameter: payload}


_REQUIRED = inspect.Parameter.empty


def _is_pydantic_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a pydantic model class (pydantic is not imported to find out)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)


def payload_of(
    function: Callable[..., Any], name: str, schema: Mapping[str, Any] | None = None, *, besides: str | None = None
) -> Payload:
    """The payload form of ``function`` (see the module docstring); ``TypeError`` for a signature none fits.
    ``besides`` names a parameter that is not the payload's (the one that receives the run's idempotency key)."""
    parameters = [p for p in inspect.signature(function).parameters.values() if p.name != besides]
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise TypeError(f"action {name}: parameter {parameter.name!r} cannot be given by name")
    if schema is not None:
        if len(parameters) > 1:
            raise TypeError(f"action {name}: a JSON Schema payload goes to one parameter, not {len(parameters)}")
        return SchemaPayload(schema, parameters[0].name if parameters else None)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except NameError as error:
        raise TypeError(
            f"action {name}: cannot resolve an annotation ({error}); define its types at module level"
        ) from None
    if len(parameters) == 1:
        only = hints.get(parameters[0].name)
        if isinstance(only, type) and issubclass(only, msgspec.Struct):
            return StructPayload(parameters[0].name, only)
        if _is_pydantic_model(only):
            return PydanticPayload(parameters[0].name, only)
    struct_name = "".join(part.capitalize() for part in name.replace("_", "-").split("-") if part) or "Payload"
    return KeywordPayload(name, struct_name, [(p.name, hints.get(p.name, Any), p.default) for p in parameters])
