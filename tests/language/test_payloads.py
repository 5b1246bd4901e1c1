"""Payload decoding and suggest/declare pairing (language/payloads.py), read from parsed envelopes; and how deep a
typed action's JSON Schema payload (domains/payloads.py) may nest."""

from __future__ import annotations

from typing import Any

import pytest

from dial_runtime.domains.payloads import MAX_DEPTH, SchemaPayload
from dial_runtime.language.parser import parse
from dial_runtime.language.payloads import (
    PairedSuggest,
    declare_value,
    json_text,
    pair_payload,
    paired,
    payload_value,
)
from dial_runtime.language.records import Declare, Element, Inform, Suggest


def elements(body: str) -> tuple[Element, ...]:
    envelope = parse(f"<dial>{body}</dial>")
    assert envelope is not None
    return envelope.elements


SUGGEST = '<dial-suggest action="a">Do it</dial-suggest>'


@pytest.mark.parametrize(
    ("body", "payload", "problem", "after"),
    [
        pytest.param('<dial-suggest action="a"><dial-payload>{"n":1}</dial-payload></dial-suggest>', {"n": 1},
                     None, 1, id="own-payload"),
        pytest.param('<dial-suggest action="a"><dial-payload>null</dial-payload></dial-suggest>'
                     '<dial-declare context-key="a">{"n":2}</dial-declare>', None, None, 1, id="own-null-counts"),
        pytest.param(SUGGEST + '<dial-declare context-key="a">{"n":2}</dial-declare>', {"n": 2}, None, 2,
                     id="bare-declare"),
        pytest.param(SUGGEST + '<dial-declare context-key="a"><dial-payload>[3]</dial-payload></dial-declare>',
                     [3], None, 2, id="declare-payload"),
        pytest.param(SUGGEST + '<dial-declare context-key="a"></dial-declare>', {}, None, 2, id="empty-declare"),
        pytest.param(SUGGEST, {}, None, 1, id="nothing-follows"),
        pytest.param(SUGGEST + "<dial-inform>x</dial-inform>", {}, None, 1, id="an-inform-follows"),
        pytest.param(SUGGEST + '<dial-declare context-key="a">{bad</dial-declare>', None,
                     "the payload is not valid JSON (Expecting property name enclosed in double quotes: "
                     "line 1 column 2 (char 1))", 2, id="bare-not-json"),
        pytest.param('<dial-suggest action="a"><dial-payload type="text/plain"> hi </dial-payload></dial-suggest>',
                     "hi", None, 1, id="not-a-json-type"),
        pytest.param('<dial-suggest action="a"><dial-payload>[1,</dial-payload></dial-suggest>', None,
                     "the payload is not valid JSON (Expecting value: line 1 column 4 (char 3))", 1,
                     id="own-not-json"),
    ],
)  # fmt: skip
def test_pair_payload(body: str, payload: Any, problem: str | None, after: int) -> None:
    assert pair_payload(elements(body), 0) == (payload, problem, after)


def test_pair_payload_needs_a_suggest() -> None:
    with pytest.raises(TypeError, match="element 0 is a dial-inform, not a dial-suggest"):
        pair_payload(elements("<dial-inform>x</dial-inform>"), 0)


@pytest.mark.parametrize(
    ("body", "value"),
    [
        pytest.param('<dial-declare context-key="k">{"a":1}</dial-declare>', {"a": 1}, id="bare-json"),
        pytest.param('<dial-declare context-key="k">plain words</dial-declare>', "plain words", id="bare-text"),
        pytest.param('<dial-declare context-key="k"/>', None, id="empty"),
        pytest.param('<dial-declare context-key="k"><dial-payload>[1]</dial-payload></dial-declare>', [1],
                     id="payload"),
        pytest.param('<dial-declare context-key="k"><dial-payload>{x</dial-payload></dial-declare>', "{x",
                     id="payload-not-json-is-its-text"),
        pytest.param('<dial-declare context-key="k"><dial-payload type="text/csv">a,b</dial-payload>'
                     "</dial-declare>", "a,b", id="payload-of-another-type"),
    ],
)  # fmt: skip
def test_declare_value(body: str, value: Any) -> None:
    declare = elements(body)[0]
    assert isinstance(declare, Declare)
    assert declare_value(declare) == value


@pytest.mark.parametrize(
    ("text", "result"),
    [
        ("1", (1, None)),
        ('{"a": [true]}', ({"a": [True]}, None)),
        ("", (None, "the payload is not valid JSON (Expecting value: line 1 column 1 (char 0))")),
    ],
)
def test_json_text(text: str, result: tuple[Any, str | None]) -> None:
    assert json_text(text) == result


def test_deeply_nested_json_is_a_problem_not_a_crash() -> None:
    value, problem = json_text("[" * 100_000 + "]" * 100_000)
    assert value is None and problem is not None


def test_payload_value_prefers_the_decoded_payload() -> None:
    suggest = Suggest(action="a", payload={"n": 1}, payload_text="ignored")
    assert payload_value(suggest) == ({"n": 1}, None)


def test_paired_pairs_each_suggestion_and_keeps_every_other_act() -> None:
    acts = elements(
        "<dial-inform>hi</dial-inform>"
        + SUGGEST
        + '<dial-declare context-key="a">{"n":1}</dial-declare>'
        + SUGGEST
        + '<dial-declare context-key="fact">1</dial-declare>'
    )
    result = paired(acts)
    assert [type(act) for act in result] == [Inform, PairedSuggest, PairedSuggest]
    first, second = result[1], result[2]
    assert isinstance(first, PairedSuggest) and isinstance(second, PairedSuggest)
    assert (first.payload, first.problem, first.declare, first.index) == ({"n": 1}, None, acts[2], 1)
    assert (second.payload, second.index, second.declare) == (1, 3, acts[4])
    assert paired(acts[:1]) == (acts[0],)
    assert paired(()) == ()


# --- a typed action's JSON Schema payload (domains/payloads.py) at any depth ------------------------------------


def nested_object(depth: int, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` objects, each holding the next as ``inner``."""
    for _ in range(depth):
        leaf = {"inner": leaf}
    return leaf


def nested_schema(depth: int) -> dict[str, Any]:
    """The schema of ``nested_object(depth, "x")``: each object two levels (the schema and its properties)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


#: A schema of any depth of payload: a node whose ``inner`` is a node.
RECURSIVE = {
    "$ref": "#/$defs/node",
    "$defs": {"node": {"type": ["object", "string"], "properties": {"inner": {"$ref": "#/$defs/node"}}}},
}


@pytest.mark.parametrize("depth", [1, MAX_DEPTH // 2 - 1, MAX_DEPTH // 2, 150, 300, 5000])
def test_a_schema_nested_past_the_limit_is_one_line_naming_it(depth: int) -> None:
    if 2 * depth + 1 <= MAX_DEPTH:  # the schema and its properties: two levels each, and the string's schema
        assert SchemaPayload(nested_schema(depth)).issue(nested_object(depth, "x")) is None
        return
    with pytest.raises(
        ValueError, match=f"^the JSON Schema nests objects and arrays more than {MAX_DEPTH} deep"
    ) as raised:
        SchemaPayload(nested_schema(depth))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("depth", [0, MAX_DEPTH, MAX_DEPTH + 1, 300, 5000])
@pytest.mark.parametrize("container", ["object", "array"])
def test_a_payload_nested_past_the_limit_is_refused_with_an_issue(depth: int, container: str) -> None:
    payload: Any = "x"
    for _ in range(depth):
        payload = {"inner": payload} if container == "object" else [payload]
    schema = (
        RECURSIVE
        if container == "object"
        else {
            "$ref": "#/$defs/list",
            "$defs": {"list": {"type": ["array", "string"], "items": {"$ref": "#/$defs/list"}}},
        }
    )
    issue = SchemaPayload(schema).issue(payload)
    if depth <= MAX_DEPTH:
        assert issue is None
    else:
        assert issue is not None and issue.code == "too-deep" and str(MAX_DEPTH) in (issue.hint or "")
