"""Outcomes and the DIAL envelopes that report them to the agent.

:func:`outcome_reply` writes the reference runtime's wire format (one ``dial-acknowledge`` and one
``dial-declare context-key="outcome:ID"`` per outcome, under a bare ``<dial>``), but always well-formed: texts and
ids are XML-escaped, tabs, newlines and carriage returns become character references, and ``<``, ``>`` and ``&``
inside the JSON body are written as JSON escapes, so no string a domain produces can break the envelope.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

STATUSES = ("done", "failed", "invalid", "dismissed", "superseded", "handed-off")

_ACKNOWLEDGEMENTS = {
    "done": "Done: {subject}.",
    "failed": "Couldn't do it: {subject}.",
    "invalid": "Not proposed to the user — the payload for {action} is invalid.",
    "dismissed": "The user dismissed: {subject}.",
    "superseded": "The user moved on without deciding: {subject}.",
    "handed-off": "Passed to the user in its own panel: {subject}.",
}

# Escapes as (character, replacement) pairs, "&" first; a chain of str.replace is cheaper than str.translate for
# the short, mostly clean strings written here (a character that is absent costs one scan and no copy).
_TEXT_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("\r", "&#13;"))
_ATTRIBUTE_ESCAPES = (*_TEXT_ESCAPES, ('"', "&quot;"), ("\t", "&#9;"), ("\n", "&#10;"))
_JSON_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))
_COMPACT_JSON = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str, check_circular=False
)


def _replaced(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    for character, replacement in escapes:
        if character in text:
            text = text.replace(character, replacement)
    return text


def escape_text(text: str) -> str:
    """Escape text content so an XML parser gives back exactly ``text`` (carriage returns included)."""
    return _replaced(text, _TEXT_ESCAPES)


def escape_attribute(value: str) -> str:
    """Escape a double-quoted attribute value so it survives attribute-value normalisation unchanged."""
    return _replaced(value, _ATTRIBUTE_ESCAPES)


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text; values JSON cannot hold are written as in :func:`to_json_ready`."""
    try:
        return _COMPACT_JSON.encode(value)
    except (TypeError, ValueError):
        return _COMPACT_JSON.encode(to_json_ready(value))


def to_json_ready(value: Any) -> Any:
    """``value`` as plain JSON data: what JSON cannot hold (non-finite floats included) becomes ``str(value)``."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (dict, Mapping)):
        return {str(key): to_json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_ready(item) for item in value]
    return str(value)


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """How one suggestion ended: exactly one per suggestion, reported to the agent."""

    id: str
    action: str
    status: str
    preview: str = ""
    result: Any = None
    error: str | None = None
    code: str | None = None
    field: str | None = None
    hint: str | None = None
    edited: bool = False
    expired: bool = False

    def fact(self) -> dict[str, Any]:
        """The JSON fact declared to the agent: action, status, then only the fields that are present."""
        fact: dict[str, Any] = {"action": self.action, "status": self.status}
        for name in ("result", "error", "code", "field", "hint"):
            value = getattr(self, name)
            if value is not None:
                fact[name] = value
        if self.edited:
            fact["edited"] = True
        if self.expired:
            fact["expired"] = True
        return fact

    def acknowledgement(self) -> str:
        """The short text of the ``dial-acknowledge`` that closes this outcome's loop."""
        template = _ACKNOWLEDGEMENTS.get(self.status)
        if template is None:
            raise ValueError(f"outcome_reply: unknown status '{self.status}'")
        return template.format(subject=self.preview or self.action, action=self.action)


def outcome_reply(outcomes: Iterable[Outcome]) -> str:
    """Write the DIAL envelope that tells the agent these outcomes (SPEC-NOTES §4.7's format, always well-formed).

    Raises ``ValueError("outcome_reply: unknown status 'weird'")`` before writing anything when a status is not
    one of :data:`STATUSES`.
    """
    outcomes = list(outcomes)
    acknowledgements = [outcome.acknowledgement() for outcome in outcomes]
    blocks = []
    for outcome, acknowledgement in zip(outcomes, acknowledgements, strict=False):
        ident = escape_attribute(outcome.id)
        status = escape_attribute(outcome.status)
        body = compact_json(outcome.fact())
        blocks.append(
            f'  <dial-acknowledge of="{ident}" yield="{ident}:{status}">{escape_text(acknowledgement)}'
            "</dial-acknowledge>\n"
            f'  <dial-declare context-key="outcome:{ident}">\n'
            f'    <dial-payload type="application/json">{_replaced(body, _JSON_ESCAPES)}</dial-payload>\n'
            "  </dial-declare>"
        )
    return "<dial>\n" + "\n".join(blocks) + "\n</dial>"


def refusal_reply(reply_id: str, reason: str) -> str:
    """Tell the agent that its reply ``reply_id`` could not be used, and why, so it can send a usable one."""
    ident = escape_attribute(reply_id)
    return (
        "<dial>\n"
        f'  <dial-acknowledge of="{ident}" yield="{ident}:invalid">'
        f"{escape_text(f'Your reply could not be used: {reason}')}</dial-acknowledge>\n"
        "</dial>"
    )
