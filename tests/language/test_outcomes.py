"""Outcome records and the envelope that reports them (SPEC-NOTES §4.7), always well-formed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from dial_runtime import Outcome, parse
from dial_runtime.language.outcomes import compact_json, outcome_reply, refusal_reply
from dial_runtime.language.schema import validate

from ..strategies import any_outcomes, any_text, outcomes


def test_the_exact_wire_format() -> None:
    outcome = Outcome(
        id="sg-3",
        action="matrix.entry.add",
        status="failed",
        preview="Add 'Brand' to Strengths",
        error="duplicate",
        hint="Pick another name.",
    )
    assert outcome_reply([outcome]) == (
        "<dial>\n"
        '  <dial-acknowledge of="sg-3" yield="sg-3:failed">Couldn\'t do it: Add \'Brand\' to Strengths.'
        "</dial-acknowledge>\n"
        '  <dial-declare context-key="outcome:sg-3">\n'
        '    <dial-payload type="application/json">'
        '{"action":"matrix.entry.add","status":"failed","error":"duplicate","hint":"Pick another name."}'
        "</dial-payload>\n"
        "  </dial-declare>\n"
        "</dial>"
    )


@pytest.mark.parametrize(
    ("status", "preview", "text"),
    [
        ("done", "Add the note 'x'", "Done: Add the note 'x'."),
        ("failed", "", "Couldn't do it: add-note."),
        ("invalid", "ignored", "Not proposed to the user — the payload for add-note is invalid."),
        ("dismissed", "P", "The user dismissed: P."),
        ("superseded", "P", "The user moved on without deciding: P."),
        ("handed-off", "P", "Passed to the user in its own panel: P."),
    ],
)
def test_acknowledgement_texts(status: str, preview: str, text: str) -> None:
    outcome = Outcome(id="sg-1", action="add-note", status=status, preview=preview)
    assert outcome.acknowledgement() == text
    envelope = parse(outcome_reply([outcome]))
    assert envelope is not None and envelope.elements[0].text == text


def test_an_unknown_status_is_refused_before_anything_is_written() -> None:
    good = Outcome(id="a", action="x", status="done")
    with pytest.raises(ValueError, match=r"^outcome_reply: unknown status 'weird'$"):
        outcome_reply([good, Outcome(id="b", action="x", status="weird")])


def test_markup_in_texts_and_json_cannot_break_the_envelope() -> None:
    outcome = Outcome(id='a"<&', action="x", status="failed", preview="Do <it> & more", error="</dial>&amp;")
    reply = outcome_reply([outcome])
    assert "Couldn't do it: Do &lt;it&gt; &amp; more." in reply
    assert '"error":"\\u003c/dial\\u003e\\u0026amp;"' in reply
    assert 'of="a&quot;&lt;&amp;"' in reply
    assert validate(reply) == []


def test_fact_lists_action_status_then_only_present_fields() -> None:
    outcome = Outcome(id="s", action="a", status="done", result={"n": 1}, edited=True)
    assert list(outcome.fact().items()) == [
        ("action", "a"),
        ("status", "done"),
        ("result", {"n": 1}),
        ("edited", True),
    ]
    assert Outcome(id="s", action="a", status="dismissed").fact() == {"action": "a", "status": "dismissed"}


def test_an_empty_list_gives_an_empty_envelope() -> None:
    assert outcome_reply([]) == "<dial>\n\n</dial>"
    assert validate(outcome_reply([])) == []


@given(st.lists(outcomes, max_size=4))
def test_outcome_replies_validate_and_parse_back_to_the_same_facts(items: list[Outcome]) -> None:
    reply = outcome_reply(items)
    assert validate(reply) == []
    envelope = parse(reply)
    assert envelope is not None
    assert envelope.issues == ()
    assert len(envelope.elements) == 2 * len(items)
    for outcome, acknowledge, declare in zip(items, envelope.elements[::2], envelope.elements[1::2], strict=False):
        assert acknowledge.type == "dial-acknowledge"
        assert acknowledge.of == outcome.id
        assert acknowledge.yields == (f"{outcome.id}:{outcome.status}",)
        assert acknowledge.text == outcome.acknowledgement().strip()
        assert declare.type == "dial-declare"
        assert declare.context_key == f"outcome:{outcome.id}"
        assert declare.payload == outcome.fact()


@pytest.mark.parametrize(
    ("text", "written"),
    [
        pytest.param("\x1b[31mred\x1b[0m", "\\u001b[31mred\\u001b[0m", id="ansi-colour"),
        pytest.param("a\x0cb", "a\\u000cb", id="form-feed"),
        pytest.param("\x00", "\\u0000", id="nul"),
        pytest.param("\ufffe\uffff", "\\ufffe\\uffff", id="non-characters"),
        pytest.param("\ud83d", "\\ud83d", id="lone-surrogate"),
        pytest.param("tab\tnew\nline\u2028", "tab\tnew\nline\u2028", id="allowed-stay"),
    ],
)
def test_characters_xml_cannot_hold_are_written_as_visible_escapes(text: str, written: str) -> None:
    outcome = Outcome(id=f"id{text}", action="x", status="failed", preview=text, error=text)
    reply = outcome_reply([outcome])
    reply.encode()  # every character can be written as UTF-8
    assert validate(reply) == []
    envelope = parse(reply)
    assert envelope is not None and envelope.issues == ()
    acknowledge, declare = envelope.elements
    assert acknowledge.text == f"Couldn't do it: {written}."
    assert acknowledge.of == f"id{written}"
    assert declare.payload["error"] == text  # type: ignore[union-attr]


def test_a_refusal_reason_xml_cannot_hold_is_written_as_an_escape() -> None:
    reply = refusal_reply("reply-\x1b", "bad \ud800 \x00")
    assert validate(reply) == []
    envelope = parse(reply)
    assert envelope is not None
    assert envelope.elements[0].text == "Your reply could not be used: bad \\ud800 \\u0000"


@given(st.lists(any_outcomes, max_size=3))
def test_any_strings_give_a_well_formed_valid_envelope_with_the_exact_facts(items: list[Outcome]) -> None:
    reply = outcome_reply(items)
    etree.fromstring(reply.encode())  # well-formed, and UTF-8 can hold it
    assert validate(reply) == []
    envelope = parse(reply)
    assert envelope is not None and envelope.issues == ()
    declares = envelope.elements[1::2]
    assert [declare.payload for declare in declares] == [outcome.fact() for outcome in items]


@given(any_text, any_text)
def test_any_refusal_is_well_formed(reply_id: str, reason: str) -> None:
    reply = refusal_reply(reply_id, reason)
    etree.fromstring(reply.encode())
    assert validate(reply) == []


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON_VALUES)
def test_compact_json_is_the_standard_encoders_text(value: object) -> None:
    assert compact_json(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
