"""What a reply's payloads mean: the JSON value of a payload, and which payload a suggestion proposes.

A suggestion's payload is its own ``<dial-payload>`` (a JSON ``null`` counts), else the ``<dial-declare>`` right
after it (bare JSON text or a payload); a suggestion with neither proposes ``{}``. A payload whose ``type`` is not
JSON is its text. :func:`paired` applies that rule to a whole envelope, so a reader of the acts never pairs them
again itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from dial_runtime.language.records import Declare, Element, Suggest, is_json_type

__all__ = ["PairedSuggest", "declare_value", "json_text", "pair_payload", "paired", "payload_value"]


def json_text(text: str) -> tuple[Any, str | None]:
    """The JSON value of ``text``, or ``(None, reason)`` when it is not JSON."""
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as error:
        return None, f"the payload is not valid JSON ({error})"


def payload_value(element: Suggest | Declare) -> tuple[Any, str | None]:
    """The value of an element's ``dial-payload`` and ``None``, or ``(None, why it is unusable)``.

    Its JSON when its type is JSON (the parser's decoded value when it has one), else its text.
    """
    if element.payload is not None:
        return element.payload, None
    text = element.payload_text or ""
    if is_json_type(element.payload_type):
        return json_text(text)
    return text, None


def declare_value(element: Declare) -> Any:
    """The fact an unpaired declare states: its payload's value or its bare body as JSON, else the text as is."""
    if element.payload_text is not None:
        value, problem = payload_value(element)
        return element.payload_text if problem is not None else value
    value, problem = json_text(element.text or "")
    return element.text if problem is not None else value


def pair_payload(elements: Sequence[Element], index: int) -> tuple[Any, str | None, int]:
    """For the suggest at ``index``: its payload, why it is unusable (``None`` if fine), the index after what it
    used (``index + 2`` when it took the declare that follows it)."""
    element = elements[index]
    if not isinstance(element, Suggest):
        raise TypeError(f"pair_payload: element {index} is a {element.type}, not a dial-suggest")
    if element.payload_text is not None:
        return (*payload_value(element), index + 1)
    following = elements[index + 1] if index + 1 < len(elements) else None
    if not isinstance(following, Declare):
        return {}, None, index + 1
    if following.payload_text is not None:
        return (*payload_value(following), index + 2)
    if not following.text:
        return {}, None, index + 2
    return (*json_text(following.text), index + 2)


class PairedSuggest(msgspec.Struct, frozen=True, kw_only=True):
    """A suggestion with the payload it proposes; ``declare`` is the declare it took its payload from, if any.

    ``problem`` says why the payload is unusable (``None`` when it is fine); ``index`` is the suggest's position
    among the envelope's elements.
    """

    suggest: Suggest
    payload: Any
    problem: str | None
    declare: Declare | None
    index: int


def paired(elements: Sequence[Element]) -> tuple[Element | PairedSuggest, ...]:
    """The envelope's acts with each suggestion paired with its payload; a declare it used is not listed again."""
    acts: list[Element | PairedSuggest] = []
    index = 0
    while index < len(elements):
        element = elements[index]
        if not isinstance(element, Suggest):
            acts.append(element)
            index += 1
            continue
        payload, problem, after = pair_payload(elements, index)
        used = elements[index + 1] if after == index + 2 else None
        declare = used if isinstance(used, Declare) else None
        acts.append(PairedSuggest(suggest=element, payload=payload, problem=problem, declare=declare, index=index))
        index = after
    return tuple(acts)
