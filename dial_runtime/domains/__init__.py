"""Domains that write themselves: typed actions (:class:`Domain`) whose payload, JSON Schema, validation and
preview come from each function's signature, and the pieces they are made of (reused by ``dial_runtime.mcp``)."""

from __future__ import annotations

from .examples import example_from_schema
from .issues import INVALID_PAYLOAD, field_path, json_schema_issue
from .payloads import KeywordPayload, Payload, PydanticPayload, SchemaPayload, StructPayload
from .toolkit import UNKNOWN_ACTION, ActionDefinition, Domain, default_preview, words

__all__ = [
    "INVALID_PAYLOAD",
    "UNKNOWN_ACTION",
    "ActionDefinition",
    "Domain",
    "KeywordPayload",
    "Payload",
    "PydanticPayload",
    "SchemaPayload",
    "StructPayload",
    "default_preview",
    "example_from_schema",
    "field_path",
    "json_schema_issue",
    "words",
]
