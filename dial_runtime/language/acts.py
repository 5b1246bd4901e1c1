"""The speech acts of DIAL: one registry that the parser, the schema's messages and the tests read.

Each :class:`SpeechAct` names the element, the record it is read into, the attributes it carries (XML name ->
record field and how the value is read) and what its content holds. Adding a speech act means declaring it in
both XSDs (``dial_runtime/dial_xsd/``), adding its record to ``records.py`` and its entry here, and handling it in
the runtime; a test holds this registry equal to the lenient XSD's element set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import msgspec

from dial_runtime.language.records import (
    Acknowledge,
    AskElement,
    Declare,
    Delegate,
    Element,
    Execute,
    Inform,
    Phatic,
    Suggest,
)

__all__ = [
    "ACT_NAMES",
    "ELEMENT_TYPES",
    "HELPER_ATTRIBUTES",
    "SPEECH_ACTS",
    "Attributes",
    "Content",
    "SpeechAct",
    "ValueKind",
]

#: How an attribute's value is read: kept as text, a whitespace-separated list of event names, an ``xs:boolean``,
#: a non-negative number of seconds, an unsigned 32-bit integer.
ValueKind = Literal["text", "events", "boolean", "seconds", "unsigned"]

#: XML attribute name -> (record field, how its value is read). Absent attributes are not passed, so the
#: records' own defaults (SPEC-NOTES section 1) apply.
Attributes = Mapping[str, tuple[str, ValueKind]]

#: What an act's content holds besides its text: a ``<dial-payload>``, ``<dial-option>`` children, ``<step>``
#: children, a ``<dial-context>`` holding a payload; ``"text"``: text only; ``"empty"``: nothing that is read.
Content = Literal["payload", "options", "steps", "context", "text", "empty"]


class SpeechAct(msgspec.Struct, frozen=True, kw_only=True):
    """One speech act: its element name, record type, attributes and content."""

    name: str
    record: type[Element]
    attributes: Attributes
    content: Content


_COMMON: Final[dict[str, tuple[str, ValueKind]]] = {
    "id": ("id", "text"),
    "observe": ("observe", "text"),
    "yield": ("yields", "events"),
    "addressed-to": ("addressed_to", "text"),
    "lang": ("lang", "text"),
}


def _act(name: str, record: type[Element], content: Content, **attributes: tuple[str, ValueKind]) -> SpeechAct:
    extra = {xml_name.replace("_", "-"): spec for xml_name, spec in attributes.items()}
    return SpeechAct(name=name, record=record, attributes={**_COMMON, **extra}, content=content)


#: Every speech act, by element name, in the order of the spec.
SPEECH_ACTS: Final[Mapping[str, SpeechAct]] = {
    act.name: act
    for act in (
        _act("dial-inform", Inform, "payload", render=("render", "text")),
        _act(
            "dial-ask",
            AskElement,
            "options",
            response_type=("response_type", "text"),
            timeout=("timeout", "seconds"),
        ),
        _act(
            "dial-suggest",
            Suggest,
            "payload",
            render=("render", "text"),
            action=("action", "text"),
            multi=("multi", "boolean"),
        ),
        _act("dial-execute", Execute, "steps"),
        _act("dial-acknowledge", Acknowledge, "text", of=("of", "text")),
        _act("dial-declare", Declare, "payload", context_key=("context_key", "text")),
        _act(
            "dial-delegate",
            Delegate,
            "context",
            to=("to", "text"),
            intent=("intent", "text"),
            resume=("resume", "boolean"),
        ),
        _act("dial-phatic", Phatic, "empty", signal=("signal", "text"), interval=("interval", "seconds")),
    )
}

#: The speech acts' element names.
ACT_NAMES: Final = tuple(SPEECH_ACTS)

#: Element name -> record type.
ELEMENT_TYPES: Final[Mapping[str, type[Element]]] = {name: act.record for name, act in SPEECH_ACTS.items()}

#: The attributes of the elements that are not speech acts: the root and the acts' helper children.
HELPER_ATTRIBUTES: Final[Mapping[str, Attributes]] = {
    "dial": {
        "version": ("version", "text"),
        "turn": ("turn", "unsigned"),
        "actor": ("actor", "text"),
        "session": ("session", "text"),
    },
    "dial-option": {
        "value": ("value", "text"),
        "default": ("default", "boolean"),
        "disabled": ("disabled", "boolean"),
    },
    "step": {
        "env": ("env", "text"),
        "id": ("id", "text"),
        "label": ("label", "text"),
        "observe": ("observe", "text"),
        "yield": ("yields", "events"),
    },
}
