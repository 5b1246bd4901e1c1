"""The DIAL parser: every element and attribute of SPEC-NOTES §1 with its default, the reference parser's leniency
table (§3.5) as this parser handles each row, the parsing bugs of §5 shown fixed, and prose extraction.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dial_runtime.language.acts import ELEMENT_TYPES
from dial_runtime.language.parser import DEFAULT_MAX_SIZE, MAX_ISSUES_PER_CODE, extract_prose, parse
from dial_runtime.language.records import (
    Acknowledge,
    AskElement,
    Declare,
    Delegate,
    Element,
    Envelope,
    Execute,
    Inform,
    Option,
    Phatic,
    RootAttributes,
    Step,
    Suggest,
)

from ..strategies import json_values, xml_text

ISSUE_CODES = {
    "empty-envelope",
    "quoted-envelope",
    "recovered",
    "entity",
    "doctype",
    "schema",
    "unknown-element",
    "misplaced-element",
    "nested-element",
    "extra-payload",
    "extra-context",
    "invalid-json",
    "invalid-attribute",
    "extra-envelope",
}


def envelope(reply: str) -> Envelope:
    result = parse(reply)
    assert result is not None
    return result


def only(body: str) -> Element:
    """The single speech act of ``<dial>body</dial>``."""
    result = envelope(f"<dial>{body}</dial>")
    assert len(result.elements) == 1, result
    return result.elements[0]


def value_of(element: object, name: str) -> Any:
    """A field that only some element types have."""
    return getattr(element, name)


def codes(result: Envelope) -> list[str]:
    return [issue.code for issue in result.issues]


def escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


def escape_attribute(text: str) -> str:
    escaped = escape_text(text).replace('"', "&quot;")
    return escaped.replace("\t", "&#9;").replace("\n", "&#10;")


# ---------------------------------------------------------------------------------------------- root (§1.1)


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        pytest.param("<dial>", RootAttributes(), id="bare-root"),
        pytest.param(
            '<dial version="0.1" turn="3" actor="agent" session="s-1">',
            RootAttributes(version="0.1", turn=3, actor="agent", session="s-1"),
            id="all-attributes",
        ),
        pytest.param('<dial version="0.2">', RootAttributes(version="0.2"), id="version-not-checked"),
        pytest.param('<dial actor="planner-7">', RootAttributes(actor="planner-7"), id="named-actor"),
    ],
)
def test_root_attributes(tag: str, expected: RootAttributes) -> None:
    result = envelope(f"{tag}</dial>")
    assert result.attributes == expected
    assert result.elements == ()
    assert result.issues == ()


@pytest.mark.parametrize(
    ("turn", "expected"),
    [("0", 0), ("+3", 3), ("007", 7), ("4294967295", 4294967295)],
)
def test_turn_is_an_unsigned_32_bit_integer(turn: str, expected: int) -> None:
    result = envelope(f'<dial turn="{turn}"/>')
    assert result.attributes.turn == expected
    assert result.issues == ()


@pytest.mark.parametrize("turn", ["abc", "-1", "1.5", " 3", "4294967296", "", "9" * 5000])
def test_unreadable_turn_is_none_with_an_issue(turn: str) -> None:
    result = envelope(f'<dial turn="{turn}"/>')
    assert result.attributes.turn is None
    assert "invalid-attribute" in codes(result)


# ---------------------------------------------------------------------------------------------- acts (§1.2, §1.3)

ACTS = sorted(ELEMENT_TYPES)

DEFAULTS: dict[str, dict[str, Any]] = {
    "dial-inform": {"render": "prose", "text": None, "payload": None, "payload_text": None},
    "dial-ask": {"response_type": "text", "timeout": None, "text": None, "options": ()},
    "dial-suggest": {"render": "card-list", "action": None, "multi": False, "text": None, "payload": None},
    "dial-execute": {"steps": ()},
    "dial-acknowledge": {"of": None, "text": None},
    "dial-declare": {"context_key": None, "text": None, "payload": None, "payload_type": "application/json"},
    "dial-delegate": {"to": None, "intent": None, "resume": False, "text": None, "payload": None},
    "dial-phatic": {"signal": None, "interval": None},
}


@pytest.mark.parametrize("tag", ACTS)
def test_every_act_with_no_attributes_gets_the_defaults(tag: str) -> None:
    element = only(f"<{tag}/>")
    assert isinstance(element, ELEMENT_TYPES[tag])
    assert element.type == tag
    assert (element.id, element.observe, element.yields, element.addressed_to) == (None, None, (), None)
    assert element.lang == "en"
    assert element.line == 1
    for field, value in DEFAULTS[tag].items():
        assert getattr(element, field) == value, field


@pytest.mark.parametrize("tag", ACTS)
def test_every_act_reads_the_base_attributes(tag: str) -> None:
    element = only(f'<{tag} id="e1" observe="a b" yield="x  y&#10;z" addressed-to="human" lang="pt-BR"/>')
    assert element.id == "e1"
    assert element.observe == "a b"  # one string, never split (§1.2)
    assert element.yields == ("x", "y", "z")  # split on any whitespace
    assert element.addressed_to == "human"
    assert element.lang == "pt-BR"


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [('id=""', ""), ('yield=""', ()), ('observe=""', "")],
)
def test_empty_base_attributes_stay_empty(attribute: str, expected: object) -> None:
    element = only(f"<dial-inform {attribute}/>")
    field = {"id": "id", "yield": "yields", "observe": "observe"}[attribute.split("=")[0]]
    assert getattr(element, field) == expected


@pytest.mark.parametrize(
    ("xml", "field", "expected"),
    [
        ('<dial-inform render="table"/>', "render", "table"),
        ('<dial-inform render="my-widget"/>', "render", "my-widget"),
        ('<dial-ask response-type="choice"/>', "response_type", "choice"),
        ('<dial-ask timeout="30"/>', "timeout", 30.0),
        ('<dial-ask timeout="1.5"/>', "timeout", 1.5),
        ('<dial-ask timeout="0"/>', "timeout", 0.0),
        ('<dial-ask timeout=" 2.25 "/>', "timeout", 2.25),
        ('<dial-suggest render="table"/>', "render", "table"),
        ('<dial-suggest action="add-note"/>', "action", "add-note"),
        ('<dial-suggest multi="true"/>', "multi", True),
        ('<dial-suggest multi="1"/>', "multi", True),
        ('<dial-suggest multi="false"/>', "multi", False),
        ('<dial-suggest multi="0"/>', "multi", False),
        ('<dial-acknowledge of="sg-1"/>', "of", "sg-1"),
        ('<dial-declare context-key="cart"/>', "context_key", "cart"),
        ('<dial-delegate to="billing"/>', "to", "billing"),
        ('<dial-delegate intent="refund"/>', "intent", "refund"),
        ('<dial-delegate resume="true"/>', "resume", True),
        ('<dial-phatic signal="typing"/>', "signal", "typing"),
        ('<dial-phatic signal="session-complete"/>', "signal", "session-complete"),
        ('<dial-phatic interval="2.5"/>', "interval", 2.5),
    ],
)
def test_type_attributes(xml: str, field: str, expected: object) -> None:
    result = envelope(f"<dial>{xml}</dial>")
    assert getattr(result.elements[0], field) == expected
    assert [issue.code for issue in result.issues] == ([] if result.usable else ["empty-envelope"])


@pytest.mark.parametrize(
    ("xml", "field", "expected"),
    [
        ('<dial-ask timeout="-5"/>', "timeout", None),
        ('<dial-ask timeout="abc"/>', "timeout", None),
        ('<dial-ask timeout="1e3"/>', "timeout", None),
        ('<dial-ask timeout="NaN"/>', "timeout", None),
        ('<dial-ask timeout=""/>', "timeout", None),
        ('<dial-phatic interval="soon"/>', "interval", None),
        ('<dial-suggest multi="yes"/>', "multi", False),
        ('<dial-suggest multi="True"/>', "multi", False),
        ('<dial-delegate resume="on"/>', "resume", False),
    ],
)
def test_unreadable_typed_attributes_fall_back_with_an_issue(xml: str, field: str, expected: object) -> None:
    result = envelope(f"<dial>{xml}</dial>")
    assert getattr(result.elements[0], field) == expected
    assert "invalid-attribute" in codes(result)
    assert "schema" in codes(result)  # the lenient XSD types these attributes too


def test_acts_keep_document_order_and_their_lines() -> None:
    reply = (
        "Intro line.\n"
        "<dial>\n"
        "  <dial-inform>one</dial-inform>\n"
        "  <dial-phatic signal='typing'/><dial-ask>two?</dial-ask>\n"
        "\n"
        "  <dial-acknowledge of='x'>three</dial-acknowledge>\n"
        "</dial>"
    )
    result = envelope(reply)
    assert [(element.type, element.line) for element in result.elements] == [
        ("dial-inform", 3),
        ("dial-phatic", 4),
        ("dial-ask", 4),
        ("dial-acknowledge", 6),
    ]


def test_the_typical_reply() -> None:
    reply = (
        "Sure, I can add that.\n<dial>\n"
        '  <dial-suggest action="add-item">Add "buy milk" to the list</dial-suggest>\n'
        '  <dial-declare context-key="add-item">{"text":"buy milk"}</dial-declare>\n'
        "</dial>"
    )
    result = envelope(reply)
    assert result.elements == (
        Suggest(action="add-item", text='Add "buy milk" to the list', line=3),
        Declare(context_key="add-item", text='{"text":"buy milk"}', line=4),  # bare JSON body stays in text
    )
    assert result.issues == ()
    assert result.raw == reply[reply.index("<dial>") :]
    assert extract_prose(reply) == "Sure, I can add that."


# ---------------------------------------------------------------------------------------------- text content


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param("<dial-inform>  Hello\n   world  </dial-inform>", "Hello\n   world", id="ends-trimmed"),
        pytest.param("<dial-inform></dial-inform>", None, id="empty-is-none"),
        pytest.param("<dial-inform> \n\t </dial-inform>", None, id="blank-is-none"),
        pytest.param("<dial-inform>x &lt; y &amp;&amp; z &gt; 0</dial-inform>", "x < y && z > 0", id="entities"),
        pytest.param("<dial-inform>&quot;&apos;&#60;&#x41;&#x1F600;</dial-inform>", "\"'<A😀", id="char-refs"),
        pytest.param("<dial-inform><![CDATA[a <b> & c]]></dial-inform>", "a <b> & c", id="cdata"),
        pytest.param("<dial-inform>a<!-- note -->b</dial-inform>", "ab", id="comment-dropped"),
        pytest.param("<dial-inform>a<?render fast?>b</dial-inform>", "ab", id="pi-dropped"),
        pytest.param(
            "<dial-inform>a<dial-payload>1</dial-payload>b</dial-inform>", "ab", id="payload-not-in-text"
        ),
        pytest.param("<dial-suggest>Add it<dial-payload>{}</dial-payload></dial-suggest>", "Add it", id="suggest"),
        pytest.param('<dial-declare> {"a": 1} </dial-declare>', '{"a": 1}', id="declare-bare-json"),
        pytest.param(
            "<dial-ask>Which one?<dial-option>A</dial-option><dial-option>B</dial-option></dial-ask>",
            "Which one?",
            id="ask-without-options",
        ),
        pytest.param("<dial-acknowledge of='a'>Got it.</dial-acknowledge>", "Got it.", id="acknowledge"),
        pytest.param(
            "<dial-delegate to='b'>Please review<dial-context><dial-payload>{}</dial-payload></dial-context>"
            " the draft</dial-delegate>",
            "Please review the draft",
            id="delegate-without-context",
        ),
    ],
)
def test_text_content(body: str, expected: str | None) -> None:
    element = only(body)
    assert value_of(element, "text") == expected


def test_entities_are_decoded_everywhere() -> None:
    result = envelope(
        "<dial>"
        '<dial-inform id="a&quot;b&#39;c" render="x&amp;y">t</dial-inform>'
        '<dial-ask><dial-option value="&lt;1">one &amp; only</dial-option></dial-ask>'
        '<dial-execute><step label="a&amp;b">test "$a" &lt; 3 &amp;&amp; echo ok</step></dial-execute>'
        '<dial-declare><dial-payload>{"note": "x &lt; y &amp; z"}</dial-payload></dial-declare>'
        "</dial>"
    )
    inform, ask, execute, declare = result.elements
    assert isinstance(inform, Inform)
    assert (inform.id, inform.render) == ("a\"b'c", "x&y")
    assert isinstance(ask, AskElement)
    assert ask.options == (Option(value="<1", label="one & only"),)
    assert isinstance(execute, Execute)
    assert execute.steps == (Step(label="a&b", command='test "$a" < 3 && echo ok'),)
    assert isinstance(declare, Declare)
    assert declare.payload == {"note": "x < y & z"}
    assert result.issues == ()


def test_cdata_is_decoded_in_commands_and_payloads() -> None:
    result = envelope(
        "<dial>"
        "<dial-execute><step><![CDATA[cd /srv && ls | grep '<x>']]></step></dial-execute>"
        '<dial-inform><dial-payload><![CDATA[{"html": "<b>&amp;</b>"}]]></dial-payload></dial-inform>'
        "</dial>"
    )
    execute, inform = result.elements
    assert isinstance(execute, Execute)
    assert execute.steps[0].command == "cd /srv && ls | grep '<x>'"
    assert isinstance(inform, Inform)
    assert inform.payload == {"html": "<b>&amp;</b>"}
    assert result.issues == ()


@pytest.mark.parametrize(
    "inside",
    [
        pytest.param("<!-- <dial-suggest action='x'>hidden</dial-suggest> -->", id="element-in-comment"),
        pytest.param("<!-- </dial> -->", id="end-tag-in-comment"),
        pytest.param("<?note </dial> ?>", id="end-tag-in-pi"),
    ],
)
def test_comments_and_processing_instructions_are_ignored(inside: str) -> None:
    reply = f"<dial>{inside}<dial-inform>shown</dial-inform></dial> after"
    result = envelope(reply)
    assert [element.type for element in result.elements] == ["dial-inform"]
    assert result.issues == ()
    assert extract_prose(reply) == "after"


def test_end_tag_inside_cdata_does_not_end_the_envelope() -> None:
    reply = "<dial><dial-inform><![CDATA[write </dial> to close]]></dial-inform></dial>"
    result = envelope(reply)
    assert result.raw == reply
    assert value_of(result.elements[0], "text") == "write </dial> to close"


# ---------------------------------------------------------------------------------------------- options and steps


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param(
            '<dial-option value="a">Apple</dial-option><dial-option value="b">Banana</dial-option>',
            (Option(value="a", label="Apple"), Option(value="b", label="Banana")),
            id="two",
        ),
        pytest.param(
            '<dial-option value="x"/><dial-option value="y">Y</dial-option>',
            (Option(value="x", label=""), Option(value="y", label="Y")),
            id="self-closing-does-not-swallow",
        ),
        pytest.param(
            "<dial-option> Keep it </dial-option>", (Option(value="Keep it", label="Keep it"),), id="label"
        ),
        pytest.param(
            '<dial-option value="">None</dial-option>', (Option(value="", label="None"),), id="empty-value"
        ),
        pytest.param(
            '<dial-option value="a" default="true">A</dial-option>'
            '<dial-option value="b" default="1">B</dial-option>'
            '<dial-option value="c" default="false">C</dial-option>',
            (
                Option(value="a", label="A", default=True),
                Option(value="b", label="B", default=True),
                Option(value="c", label="C"),
            ),
            id="default-xs-boolean",
        ),
        pytest.param(
            '<dial-option value="a" disabled="true">A</dial-option>',
            (Option(value="a", label="A", disabled=True),),
            id="disabled",
        ),
    ],
)
def test_options(options: str, expected: tuple[Option, ...]) -> None:
    result = envelope(f'<dial><dial-ask response-type="choice">Pick one{options}</dial-ask></dial>')
    ask = result.elements[0]
    assert isinstance(ask, AskElement)
    assert ask.options == expected
    assert ask.text == "Pick one"
    assert result.issues == ()


@pytest.mark.parametrize("value", ["True", "yes", "on"])
def test_option_boolean_that_is_not_xs_boolean_is_false_with_an_issue(value: str) -> None:
    result = envelope(
        f'<dial><dial-ask><dial-option value="a" default="{value}">A</dial-option></dial-ask></dial>'
    )
    ask = result.elements[0]
    assert isinstance(ask, AskElement)
    assert ask.options == (Option(value="a", label="A"),)
    assert "invalid-attribute" in codes(result)


def test_self_closing_ask_has_no_text() -> None:
    element = only('<dial-ask response-type="confirm" yield="del:yes del:no"/>')
    assert isinstance(element, AskElement)
    assert (element.text, element.options, element.yields) == (None, (), ("del:yes", "del:no"))


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param("<step>ls -la</step>", (Step(command="ls -la"),), id="default-env-shell"),
        pytest.param(
            '<step env="python" id="s1" label="Count" observe="start" yield="s1:ok s1:fail">\n'
            "  print(len(x))\n</step>",
            (
                Step(
                    env="python",
                    id="s1",
                    label="Count",
                    observe="start",
                    yields=("s1:ok", "s1:fail"),
                    command="print(len(x))",
                ),
            ),
            id="all-attributes",
        ),
        pytest.param(
            '<step id="a"/><step id="b">echo b</step>',
            (Step(id="a"), Step(id="b", command="echo b")),
            id="self-closing-does-not-swallow",
        ),
        pytest.param(
            '<step env="mcp:github">list issues</step>', (Step(env="mcp:github", command="list issues"),)
        ),
    ],
)
def test_steps(steps: str, expected: tuple[Step, ...]) -> None:
    result = envelope(f"<dial><dial-execute>{steps}</dial-execute></dial>")
    execute = result.elements[0]
    assert isinstance(execute, Execute)
    assert execute.steps == expected
    assert result.issues == ()


def test_steps_element_is_not_a_step() -> None:
    result = envelope("<dial><dial-execute><steps>x</steps><step>ls</step></dial-execute></dial>")
    execute = result.elements[0]
    assert isinstance(execute, Execute)
    assert execute.steps == (Step(command="ls"),)
    assert "unknown-element" in codes(result)


# ---------------------------------------------------------------------------------------------- payloads


@pytest.mark.parametrize(
    ("payload", "expected", "text", "mime", "issues"),
    [
        pytest.param(
            '<dial-payload>"Priya"</dial-payload>', "Priya", '"Priya"', "application/json", [], id="string"
        ),
        pytest.param("<dial-payload>1.50</dial-payload>", 1.5, "1.50", "application/json", [], id="number"),
        pytest.param(
            "<dial-payload>123456789012345678901234567890</dial-payload>",
            123456789012345678901234567890,
            "123456789012345678901234567890",
            "application/json",
            [],
            id="big-integer-exact",
        ),
        pytest.param(
            "<dial-payload> [1, [2]] </dial-payload>", [1, [2]], "[1, [2]]", "application/json", [], id="list"
        ),
        pytest.param("<dial-payload>null</dial-payload>", None, "null", "application/json", [], id="json-null"),
        pytest.param(
            '<dial-payload>{"a": 1, "a": 2}</dial-payload>',
            {"a": 2},
            '{"a": 1, "a": 2}',
            "application/json",
            [],
            id="duplicate-key-last-wins",
        ),
        pytest.param(
            '<dial-payload type="application/vnd.acme+json">{"x": true}</dial-payload>',
            {"x": True},
            '{"x": true}',
            "application/vnd.acme+json",
            [],
            id="plus-json",
        ),
        pytest.param(
            '<dial-payload type="Application/JSON; charset=utf-8">[]</dial-payload>',
            [],
            "[]",
            "Application/JSON; charset=utf-8",
            [],
            id="json-with-parameters",
        ),
        pytest.param(
            '<dial-payload type="text/csv">a,b\n1,2</dial-payload>',
            None,
            "a,b\n1,2",
            "text/csv",
            [],
            id="csv-kept",
        ),
        pytest.param(
            "<dial-payload>{'a': 1}</dial-payload>", None, "{'a': 1}", "application/json", ["invalid-json"]
        ),
        pytest.param(
            "<dial-payload>[1, 2,]</dial-payload>", None, "[1, 2,]", "application/json", ["invalid-json"]
        ),
        pytest.param(
            "<dial-payload>NaN</dial-payload>", None, "NaN", "application/json", ["invalid-json"], id="nan"
        ),
        pytest.param(
            '<dial-payload>{"x": -Infinity}</dial-payload>',
            None,
            '{"x": -Infinity}',
            "application/json",
            ["invalid-json"],
            id="infinity",
        ),
        pytest.param("<dial-payload/>", None, "", "application/json", ["invalid-json"], id="empty"),
    ],
)
def test_payload_variants(payload: str, expected: Any, text: str, mime: str, issues: list[str]) -> None:
    result = envelope(f"<dial><dial-inform>{payload}</dial-inform></dial>")
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    assert inform.payload == expected
    assert inform.payload_text == text
    assert inform.payload_type == mime
    assert codes(result) == issues


def test_absent_payload_differs_from_json_null() -> None:
    absent = only("<dial-suggest>x</dial-suggest>")
    null = only("<dial-suggest>x<dial-payload>null</dial-payload></dial-suggest>")
    assert isinstance(absent, Suggest)
    assert isinstance(null, Suggest)
    assert (absent.payload, absent.payload_text) == (None, None)
    assert (null.payload, null.payload_text) == (None, "null")


def test_json_object_keys_keep_their_order() -> None:
    element = only(
        '<dial-declare><dial-payload>{"z": 1, "a": 2, "m": {"y": 0, "b": 1}}</dial-payload></dial-declare>'
    )
    assert isinstance(element, Declare)
    assert list(element.payload) == ["z", "a", "m"]
    assert list(element.payload["m"]) == ["y", "b"]


def test_invalid_json_issue_says_why_and_where() -> None:
    reply = 'Text.\n<dial>\n<dial-inform>\n<dial-payload>\n{"a": 1,\n "b": }</dial-payload></dial-inform></dial>'
    result = envelope(reply)
    (issue,) = result.issues
    assert issue.code == "invalid-json"
    assert issue.line == 6
    assert "Expecting value" in issue.message
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    assert inform.payload_text == '{"a": 1,\n "b": }'


def test_second_payload_is_reported_and_not_used() -> None:
    result = envelope(
        '<dial><dial-inform>\n<dial-payload>{"a": 1}</dial-payload>\n<dial-payload>2</dial-payload>\n'
        "</dial-inform></dial>"
    )
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    assert (inform.payload, inform.payload_text) == ({"a": 1}, '{"a": 1}')
    extra = [issue for issue in result.issues if issue.code == "extra-payload"]
    assert [issue.line for issue in extra] == [3]


@pytest.mark.parametrize("tag", ["dial-inform", "dial-suggest", "dial-declare"])
def test_payload_carriers(tag: str) -> None:
    element = only(f'<{tag}>words<dial-payload type="application/json">{{"k": [1]}}</dial-payload></{tag}>')
    assert value_of(element, "payload") == {"k": [1]}
    assert value_of(element, "payload_text") == '{"k": [1]}'
    assert value_of(element, "text") == "words"


def test_delegate_reads_its_context_payload() -> None:
    result = envelope(
        '<dial><dial-delegate to="billing" intent="refund" resume="1">Refund order 42.'
        '<dial-context><dial-payload>{"order": 42}</dial-payload></dial-context></dial-delegate></dial>'
    )
    assert result.elements == (
        Delegate(
            to="billing",
            intent="refund",
            resume=True,
            text="Refund order 42.",
            payload={"order": 42},
            payload_text='{"order": 42}',
            line=1,
        ),
    )
    assert result.issues == ()


def test_phatic_open_close_pair_drops_its_content() -> None:
    result = envelope('<dial><dial-phatic signal="thinking">hmm</dial-phatic></dial>')
    assert result.elements == (Phatic(signal="thinking", line=1),)
    assert set(codes(result)) <= {"schema"}


# ---------------------------------------------------------------------------------------------- misplaced elements


@pytest.mark.parametrize(
    ("body", "expected_types", "code"),
    [
        pytest.param("<dial-foo>f</dial-foo><dial-inform>i</dial-inform>", ["dial-inform"], "unknown-element"),
        pytest.param("<dial-payload>{}</dial-payload>", [], "misplaced-element", id="top-level-payload"),
        pytest.param("<dial-option value='a'>A</dial-option>", [], "misplaced-element", id="top-level-option"),
        pytest.param("<step>ls</step>", [], "misplaced-element", id="top-level-step"),
        pytest.param("<dial-context/>", [], "misplaced-element", id="top-level-context"),
        pytest.param(
            "<dial-inform>a<dial-ask>q</dial-ask></dial-inform>",
            ["dial-inform"],
            "nested-element",
            id="nested-act",
        ),
        pytest.param(
            "<dial-ask>q<dial-payload>{}</dial-payload></dial-ask>",
            ["dial-ask"],
            "misplaced-element",
            id="payload",
        ),
        pytest.param(
            "<dial-inform>a<dial-option>o</dial-option></dial-inform>", ["dial-inform"], "misplaced-element"
        ),
        pytest.param("<dial-inform>a <b>bold</b> c</dial-inform>", ["dial-inform"], "unknown-element", id="html"),
    ],
)
def test_elements_that_are_not_speech_acts_are_reported(body: str, expected_types: list[str], code: str) -> None:
    result = envelope(f"<dial>{body}</dial>")
    assert [element.type for element in result.elements] == expected_types
    assert code in codes(result)


def test_nested_act_is_not_promoted() -> None:
    result = envelope(
        "<dial><dial-inform>before <dial-suggest action='x'>s</dial-suggest> after</dial-inform></dial>"
    )
    assert result.elements == (Inform(text="before  after", line=1),)
    assert codes(result) == ["nested-element", "schema"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        pytest.param("<dial-foo/>", "dial-foo", id="unknown-child-of-root"),
        pytest.param('<dial-ask timeout="soon"/>', "timeout", id="typed-attribute"),
        pytest.param("<dial-execute><dial-payload/></dial-execute>", "dial-payload", id="misplaced-payload"),
    ],
)
def test_schema_errors_are_reported_with_readable_messages(body: str, needle: str) -> None:
    reply = f"prose\n<dial>\n{body}</dial>"
    schema = [issue for issue in envelope(reply).issues if issue.code == "schema"]
    assert schema
    assert needle in schema[0].message
    assert schema[0].line == 3


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param('Sure.\n<dial><dial-suggest action="a">Do it</dial-suggest></dial>', id="valid"),
        pytest.param('<dial turn="x"><dial-ask timeout="soon">Now?</dial-ask><dial-foo/></dial>', id="invalid"),
        pytest.param(
            "<dial>" + '<dial-inform render="nope">x</dial-inform>' * (MAX_ISSUES_PER_CODE + 3) + "</dial>",
            id="many-schema-errors",
        ),
        pytest.param("<dial><dial-inform>a <b>bold</b> move</dial-inform> <dial></dial>", id="stray-and-extra"),
    ],
)
def test_parse_without_the_schema_reads_the_same_envelope_less_its_schema_issues(reply: str) -> None:
    checked, unchecked = envelope(reply), parse(reply, schema=False)
    assert unchecked is not None
    assert (unchecked.attributes, unchecked.elements, unchecked.raw) == (
        checked.attributes,
        checked.elements,
        checked.raw,
    )
    assert unchecked.issues == tuple(issue for issue in checked.issues if issue.code != "schema")
    assert "schema" not in codes(unchecked)


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param("<dial><<<>>></dial>", id="refused-while-fed"),
        pytest.param("<dial><dial-inform>open", id="refused-at-the-end"),
        pytest.param("<dial><dial-inform>&bogus;</dial-inform></dial>", id="undefined-entity"),
    ],
)
def test_a_broken_envelope_leaves_nothing_behind_for_the_next_one(broken: str) -> None:
    """The strict parser is reused: after a reply it could not read, the next one is read on its own."""
    assert envelope(broken).issues
    after = envelope('<dial><dial-inform id="i">fine</dial-inform></dial>')
    assert (after.issues, after.elements) == ((), (Inform(id="i", text="fine", line=1),))


# ---------------------------------------------------------------------------------------------- envelope location


@pytest.mark.parametrize(
    ("reply", "raw"),
    [
        pytest.param("<dial></dial>", "<dial></dial>", id="bare"),
        pytest.param("a <dial/> b", "<dial/>", id="self-closing"),
        pytest.param('a <dial version="0.1"/> b', '<dial version="0.1"/>', id="self-closing-attributes"),
        pytest.param("<dial\n  turn='1'\n>x</dial >", "<dial\n  turn='1'\n>x</dial >", id="whitespace"),
        pytest.param("<dialog>no</dialog> <dial>x</dial>", "<dial>x</dial>", id="dialog-skipped"),
        pytest.param("Use <dial-ask> to ask. <dial>x</dial>", "<dial>x</dial>", id="act-in-prose-skipped"),
        pytest.param('<dial title="a>b">x</dial>', '<dial title="a>b">x</dial>', id="quoted-gt"),
        pytest.param("type <dial to start. <dial>x</dial>", "<dial>x</dial>", id="not-a-tag"),
        pytest.param("<dial>open", "<dial>open", id="no-end"),
    ],
)
def test_envelope_bounds(reply: str, raw: str) -> None:
    assert envelope(reply).raw == raw


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "no envelope here",
        "<dialog>x</dialog>",
        "<DIAL>x</DIAL>",
        "<d:dial>x</d:dial>",
        "<dial-inform>x</dial-inform>",
    ],
)
def test_no_envelope(reply: str) -> None:
    assert parse(reply) is None


def test_unclosed_envelope_runs_to_the_end_with_an_issue() -> None:
    result = envelope("Here:\n<dial>\n<dial-inform>one</dial-inform>\n<dial-inform>two")
    assert [value_of(element, "text") for element in result.elements] == ["one", "two"]
    assert result.issues[0].code == "recovered"
    assert "no </dial>" in result.issues[0].message
    assert result.issues[0].line == 2


def test_later_envelopes_are_reported_not_parsed_and_kept_in_the_prose() -> None:
    reply = "A\n<dial><dial-inform>1</dial-inform></dial>\nB\n<dial><dial-inform>2</dial-inform></dial>\n<dial/>"
    result = envelope(reply)
    assert [value_of(element, "text") for element in result.elements] == ["1"]
    assert [(issue.code, issue.line) for issue in result.issues] == [("extra-envelope", 4), ("extra-envelope", 5)]
    assert extract_prose(reply) == "A\n\nB\n<dial><dial-inform>2</dial-inform></dial>\n<dial/>"


def test_default_namespace_on_the_root_is_harmless() -> None:
    result = envelope('<dial xmlns="urn:example:dial"><dial-inform>x</dial-inform></dial>')
    assert result.elements == (Inform(text="x", line=1),)
    assert result.issues == ()


def test_lines_count_from_the_start_of_the_reply() -> None:
    reply = (
        "l1\nl2\nl3 <dial>\n<dial-inform>\n<dial-payload>{bad}</dial-payload></dial-inform>\n<dial-foo/></dial>"
    )
    result = envelope(reply)
    assert result.elements[0].line == 4
    assert [(issue.code, issue.line) for issue in result.issues if issue.code != "schema"] == [
        ("invalid-json", 5),
        ("unknown-element", 6),
    ]


def test_defaults_constants() -> None:
    assert DEFAULT_MAX_SIZE == 8 * 1024 * 1024
    assert MAX_ISSUES_PER_CODE > 0


# ---------------------------------------------------------------------------------------------- recovery


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param("<dial-inform>a & b</dial-inform>", "a & b", id="raw-ampersand"),
        pytest.param("<dial-inform>if a < b</dial-inform>", "if a < b", id="raw-lt"),
        pytest.param("<dial-inform>if x<y then</dial-inform>", "if x<y then", id="lt-before-letter"),
        pytest.param("<dial-inform>a ]]> b</dial-inform>", "a ]]> b", id="cdata-end-in-text"),
        pytest.param("<dial-inform>a <!-- b</dial-inform>", "a <!-- b", id="unterminated-comment"),
        pytest.param("<dial-inform>x &nbsp; y</dial-inform>", "x &nbsp; y", id="undefined-entity-kept-as-text"),
        pytest.param("<dial-inform>unclosed", "unclosed", id="unclosed-element"),
        pytest.param("<dial-inform>a</b>c</dial-inform>", "a</b>c", id="stray-end-tag"),
    ],
)
def test_malformed_text_is_recovered_and_reported(body: str, expected: str) -> None:
    result = envelope(f"<dial>{body}</dial>")
    assert [value_of(element, "text") for element in result.elements] == [expected]
    assert {"recovered", "entity"} & set(codes(result))
    assert all(issue.line == 1 for issue in result.issues)


@pytest.mark.parametrize(
    ("tag", "field", "expected"),
    [
        pytest.param("<dial-inform id=x>", "id", "x", id="unquoted"),
        pytest.param("<dial-inform id=x/y>", "id", "x/y", id="unquoted-slash"),
        pytest.param('<dial-inform id="1" id="2">', "id", "1", id="duplicate-first-wins"),
        pytest.param('<dial-inform id="a & b">', "id", "a & b", id="raw-ampersand-in-value"),
        pytest.param("<dial-inform id='it&apos;s' render=table>", "render", "table", id="mixed"),
        pytest.param('<dial-inform id="a"render="b">', "render", "b", id="no-space-between-attributes"),
    ],
)
def test_malformed_attributes_are_recovered(tag: str, field: str, expected: str) -> None:
    result = envelope(f"<dial>{tag}text</dial-inform></dial>")
    element = result.elements[0]
    assert getattr(element, field) == expected
    assert value_of(element, "text") == "text"
    assert "recovered" in codes(result)


def test_mismatched_tags_invent_no_element() -> None:
    result = envelope("<dial><dial-inform>a<dial-ask>b</dial-inform>c</dial-ask></dial>")
    assert [element.type for element in result.elements] == ["dial-inform"]
    assert "recovered" in codes(result)


def test_malformed_first_envelope_is_recovered_not_skipped() -> None:
    reply = "<dial><dial-inform>a & b</dial-inform></dial> <dial><dial-inform>good</dial-inform></dial>"
    result = envelope(reply)
    assert [value_of(element, "text") for element in result.elements] == ["a & b"]
    assert "extra-envelope" in codes(result)


def test_broken_root_start_tag_gives_an_empty_envelope_with_issues() -> None:
    result = envelope('<dial a="x><dial-inform>t</dial-inform></dial>')
    assert result.elements == ()
    assert "recovered" in codes(result)


@pytest.mark.parametrize("count", [3, 200])
def test_schema_errors_are_found_among_many_siblings(count: int) -> None:
    reply = "<dial turn='x'>\n" + "<dial-inform/>\n" * count + '<dial-ask timeout="-1">\n'
    reply += "<dial-option/>\n" * count + "<dial-option default='no'/>\n</dial-ask>\n</dial>"
    schema = [(issue.line, issue.message) for issue in envelope(reply).issues if issue.code == "schema"]
    assert [line for line, _ in schema] == [1, count + 2, 2 * count + 3]
    assert ["turn" in schema[0][1], "timeout" in schema[1][1], "default" in schema[2][1]] == [True] * 3


def test_issues_are_capped_per_code() -> None:
    result = envelope("<dial><dial-inform>" + "& " * (MAX_ISSUES_PER_CODE + 50) + "</dial-inform></dial>")
    recovered = [issue for issue in result.issues if issue.code == "recovered"]
    assert len(recovered) == MAX_ISSUES_PER_CODE + 1
    assert recovered[-1].message.startswith("50 more")


# ---------------------------------------------------------------------------------------------- SPEC-NOTES §3.5

ROWS = [
    # 1: the envelope is found inside prose; the prose is what is around it.
    pytest.param(
        "Hi <dial><dial-inform>x</dial-inform></dial> bye",
        {"types": ["dial-inform"], "texts": ["x"], "codes": [], "prose": "Hi  bye"},
        id="row01-prose-around-envelope-is-separate",
    ),
    # 2: only the first envelope is parsed; the second is reported and stays in the prose.
    pytest.param(
        "<dial><dial-inform>1</dial-inform></dial> mid <dial><dial-inform>2</dial-inform></dial>",
        {"texts": ["1"], "codes": ["extra-envelope"], "prose": "mid <dial><dial-inform>2</dial-inform></dial>"},
        id="row02-second-envelope-reported-and-left-in-prose",
    ),
    # 3: entities are decoded, in text and in attributes.
    pytest.param(
        '<dial><dial-inform id="a&quot;b">x &lt; y &amp; z</dial-inform></dial>',
        {"ids": ['a"b'], "texts": ["x < y & z"], "codes": []},
        id="row03-entities-decoded",
    ),
    # 4: a raw && or < is repaired (and reported) instead of being a fatal error.
    pytest.param(
        "<dial><dial-execute><step>cd /home && pwd</step><step>test a < b</step></dial-execute></dial>",
        {"commands": ["cd /home && pwd", "test a < b"], "codes": ["recovered", "recovered", "recovered"]},
        id="row04-raw-ampersand-and-lt-recovered",
    ),
    # 5: CDATA content is decoded into text.
    pytest.param(
        "<dial><dial-inform><![CDATA[a <b> c]]></dial-inform></dial>",
        {"texts": ["a <b> c"], "codes": []},
        id="row05-cdata-decoded",
    ),
    # 6: a commented-out element is not an element.
    pytest.param(
        "<dial><!-- <dial-inform>hidden</dial-inform> --><dial-inform>shown</dial-inform></dial>",
        {"texts": ["shown"], "codes": []},
        id="row06-commented-element-ignored",
    ),
    # 7: a prefixed root is not a DIAL envelope (DIAL has no namespace), as in the reference.
    pytest.param(
        '<d:dial xmlns:d="urn:d"><d:dial-inform>x</d:dial-inform></d:dial>',
        None,
        id="row07-prefixed-root-is-no-envelope",
    ),
    # 8: an apostrophe inside a double-quoted value is part of the value.
    pytest.param(
        '<dial><dial-inform id="it\'s">x</dial-inform></dial>',
        {"ids": ["it's"], "codes": []},
        id="row08-other-quote-inside-value",
    ),
    # 9: spaces around '=' are fine XML; an unquoted value is quoted and reported.
    pytest.param(
        '<dial><dial-inform id = "x">a</dial-inform><dial-inform id=y>b</dial-inform></dial>',
        {"ids": ["x", "y"], "codes": ["recovered"]},
        id="row09-spaces-around-equals-and-unquoted-value",
    ),
    # 10: attribute names match whole: data-id is not id.
    pytest.param(
        '<dial><dial-inform data-id="z" id="r">x</dial-inform></dial>',
        {"ids": ["r"], "codes": []},
        id="row10-data-id-is-not-id",
    ),
    # 11: a '>' inside a quoted value does not end the tag.
    pytest.param(
        '<dial><dial-inform title="a>b">x</dial-inform></dial>',
        {"texts": ["x"], "codes": []},
        id="row11-gt-inside-attribute-value",
    ),
    # 12: duplicate attribute: the first wins, as in the reference, and the repair is reported.
    pytest.param(
        '<dial><dial-inform id="1" id="2">x</dial-inform></dial>',
        {"ids": ["1"], "codes": ["recovered"]},
        id="row12-duplicate-attribute-first-wins",
    ),
    # 13: a nested inform is nested: the outer keeps "a" and "c", the inner is reported, not promoted.
    pytest.param(
        "<dial><dial-inform>a<dial-inform>b</dial-inform>c</dial-inform></dial>",
        {"texts": ["ac"], "codes": ["nested-element"]},
        id="row13-nested-inform-reported",
    ),
    # 14: a nested ask is reported, not an element, and its markup is not in the inform's text.
    pytest.param(
        "<dial><dial-inform>a<dial-ask>q</dial-ask></dial-inform></dial>",
        {"types": ["dial-inform"], "texts": ["a"], "codes": ["nested-element"]},
        id="row14-nested-ask-reported",
    ),
    # 15: an unclosed inform is recovered (libxml2 closes it); the ask inside it is not promoted.
    pytest.param(
        "<dial><dial-inform>x <dial-ask>Q</dial-ask></dial>",
        {"types": ["dial-inform"], "texts": ["x"], "codes": ["recovered", "nested-element"]},
        id="row15-unclosed-inform-recovered-ask-not-promoted",
    ),
    # 16: whitespace before '>' of an end tag is fine XML.
    pytest.param(
        "<dial><dial-inform>x</dial-inform ></dial >",
        {"texts": ["x"], "codes": []},
        id="row16-space-in-end-tag",
    ),
    # 17: unknown elements and top-level payloads or options are reported instead of silently dropped.
    pytest.param(
        "<dial><dial-foo>f</dial-foo><dial-payload>{}</dial-payload><dial-option>o</dial-option></dial>",
        {"types": [], "codes": ["unknown-element", "misplaced-element", "misplaced-element"]},
        id="row17-unknown-and-top-level-payload-option-reported",
    ),
    # 18: a mismatched end tag is recovered; <dial-inform-x> is an unknown element, not an inform.
    pytest.param(
        "<dial><dial-inform-x>r</dial-inform></dial>",
        {"types": [], "codes": ["recovered", "recovered", "unknown-element"]},
        id="row18-mismatched-tag-is-unknown-element",
    ),
    # 19: a self-closing option is one option.
    pytest.param(
        '<dial><dial-ask><dial-option value="x"/><dial-option value="y">Y</dial-option></dial-ask></dial>',
        {"options": [Option(value="x"), Option(value="y", label="Y")], "codes": []},
        id="row19-self-closing-option",
    ),
    # 20: a self-closing step is one step.
    pytest.param(
        "<dial><dial-execute><step/><step>ls</step></dial-execute></dial>",
        {"commands": ["", "ls"], "codes": []},
        id="row20-self-closing-step",
    ),
    # 21: <dial/> is an empty envelope, not "no envelope".
    pytest.param(
        "<dial/>", {"types": [], "codes": [], "prose": ""}, id="row21-self-closing-root-is-empty-envelope"
    ),
    # 22: without a <dial> start tag there is no envelope: the text is prose.
    pytest.param("<dial-inform>x</dial-inform></dial>", None, id="row22-no-root-start-no-envelope"),
    # 23: <dialogue> does not start the envelope; the real root keeps its attributes.
    pytest.param(
        '<dialogue>hi</dialogue> <dial actor="agent"><dial-inform>x</dial-inform></dial>',
        {"actor": "agent", "texts": ["x"], "codes": [], "prose": "<dialogue>hi</dialogue>"},
        id="row23-dialogue-is-prose",
    ),
    # 24: a raw </dial> in text still ends the envelope (it must be escaped); the open inform is recovered.
    pytest.param(
        "<dial><dial-inform>a </dial> b</dial-inform></dial>",
        {"texts": ["a"], "codes": ["recovered"], "prose": "b</dial-inform></dial>"},
        id="row24-raw-end-tag-in-text-ends-envelope-reported",
    ),
    # 25: a raw </dial-payload> in JSON closes the payload: invalid JSON (reported, text kept), and the second
    # </dial-payload> closes nothing, so it is kept as text (reported) instead of lost.
    pytest.param(
        '<dial><dial-inform><dial-payload>{"a":"</dial-payload>"}</dial-payload></dial-inform></dial>',
        {"payloads": [None], "texts": ['"}</dial-payload>'], "codes": ["recovered", "invalid-json"]},
        id="row25-raw-payload-end-in-json-reported",
    ),
    # 26: option default is xs:boolean: "1" is true.
    pytest.param(
        '<dial><dial-ask><dial-option value="a" default="1">A</dial-option></dial-ask></dial>',
        {"options": [Option(value="a", label="A", default=True)], "codes": []},
        id="row26-default-1-is-true",
    ),
    # 27: turn 0 and +3 are read as the reference reads them (u32).
    pytest.param('<dial turn="0"/>', {"turn": 0, "codes": []}, id="row27-turn-zero"),
    pytest.param('<dial turn="+3"/>', {"turn": 3, "codes": []}, id="row27-turn-plus-three"),
    # 28: observe is one string, not split.
    pytest.param(
        '<dial><dial-inform observe="a b">x</dial-inform></dial>',
        {"observes": ["a b"], "codes": []},
        id="row28-observe-not-split",
    ),
    # 29: a text/csv payload keeps its text; no JSON is attempted and nothing is reported.
    pytest.param(
        '<dial><dial-inform><dial-payload type="text/csv">a,b\n1,2</dial-payload></dial-inform></dial>',
        {"payloads": [None], "payload_texts": ["a,b\n1,2"], "codes": []},
        id="row29-csv-payload-kept",
    ),
    # 30: only the ends are trimmed; internal whitespace is kept.
    pytest.param(
        "<dial><dial-inform>  a\n   b  </dial-inform></dial>",
        {"texts": ["a\n   b"], "codes": []},
        id="row30-internal-whitespace-kept",
    ),
]


def _summary(reply: str, result: Envelope) -> dict[str, Any]:
    elements = result.elements
    steps = [step for element in elements if isinstance(element, Execute) for step in element.steps]
    return {
        "types": [element.type for element in elements],
        "texts": [getattr(element, "text", None) for element in elements],
        "ids": [element.id for element in elements],
        "observes": [element.observe for element in elements],
        "payloads": [getattr(element, "payload", None) for element in elements],
        "payload_texts": [getattr(element, "payload_text", None) for element in elements],
        "options": [
            option for element in elements if isinstance(element, AskElement) for option in element.options
        ],
        "commands": [step.command for step in steps],
        "codes": [code for code in codes(result) if code != "schema"],  # schema issues: tested on their own
        "prose": extract_prose(reply),
        "turn": result.attributes.turn,
        "actor": result.attributes.actor,
    }


@pytest.mark.parametrize(("reply", "expected"), ROWS)
def test_spec_notes_table_3_5(reply: str, expected: dict[str, Any] | None) -> None:
    result = parse(reply)
    if expected is None:
        assert result is None
        assert extract_prose(reply) == reply.strip()
        return
    assert result is not None
    summary = _summary(reply, result)
    assert {key: summary[key] for key in expected} == expected


# ---------------------------------------------------------------------------------------------- SPEC-NOTES §5


def test_bug01_entities_and_cdata_are_decoded() -> None:
    element = only("<dial-inform>battery_level &lt; 0.1 <![CDATA[& <ok>]]></dial-inform>")
    assert value_of(element, "text") == "battery_level < 0.1 & <ok>"


def test_bug02_tags_inside_comments_are_not_elements() -> None:
    result = envelope("<dial><!-- <dial-suggest action='rm'>x</dial-suggest> --></dial>")
    assert result.elements == ()


def test_bug03_second_envelope_is_reported_and_stays_in_the_prose() -> None:
    reply = "<dial><dial-inform>first</dial-inform></dial> and <dial><dial-inform>later</dial-inform></dial>"
    assert codes(envelope(reply)) == ["extra-envelope"]
    assert "<dial><dial-inform>later</dial-inform></dial>" in extract_prose(reply)


@pytest.mark.parametrize(
    "prose", ["<dialog>x</dialog>", "Mention <dial-ask> here.", "<dialogue>", "<dial-inform>early</dial-inform>"]
)
def test_bug04_envelope_starts_only_at_a_dial_start_tag(prose: str) -> None:
    reply = f'{prose}\n<dial turn="2"><dial-inform>x</dial-inform></dial>'
    result = envelope(reply)
    assert result.attributes.turn == 2
    assert extract_prose(reply) == prose


def test_bug05_attribute_names_match_whole_names() -> None:
    result = envelope(
        '<dial><dial-inform data-id="z" id="r">x</dial-inform>'
        '<dial-acknowledge proof="p">y</dial-acknowledge>'
        '<dial-delegate auto="A">z</dial-delegate></dial>'
    )
    inform, acknowledge, delegate = result.elements
    assert inform.id == "r"
    assert isinstance(acknowledge, Acknowledge)
    assert acknowledge.of is None
    assert isinstance(delegate, Delegate)
    assert delegate.to is None


def test_bug06_quotes_and_spaces_around_equals() -> None:
    result = envelope("<dial><dial-inform id = \"it's\" render='a\"b'>x</dial-inform></dial>")
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    assert (inform.id, inform.render) == ("it's", 'a"b')
    assert result.issues == ()


def test_bug07_nesting_whitespace_and_unclosed_elements() -> None:
    result = envelope("<dial><dial-inform>x</dial-inform ><dial-inform>open <dial-ask>Q</dial-ask></dial>")
    assert [(element.type, value_of(element, "text")) for element in result.elements] == [
        ("dial-inform", "x"),
        ("dial-inform", "open"),
    ]


def test_bug08_self_closing_options_and_steps_do_not_swallow_siblings() -> None:
    result = envelope(
        '<dial><dial-ask><dial-option value="a"/><dial-option value="b"/></dial-ask>'
        '<dial-execute><step id="1"/><step id="2"/></dial-execute></dial>'
    )
    ask, execute = result.elements
    assert isinstance(ask, AskElement)
    assert [option.value for option in ask.options] == ["a", "b"]
    assert isinstance(execute, Execute)
    assert [step.id for step in execute.steps] == ["1", "2"]


def test_bug09_escaped_end_tags_in_text_and_json_do_not_truncate() -> None:
    result = envelope(
        "<dial><dial-inform>Close it with &lt;/dial&gt; or <![CDATA[</dial>]]>.</dial-inform>"
        '<dial-declare><dial-payload>{"x": "&lt;/dial-payload>"}</dial-payload></dial-declare></dial>'
    )
    inform, declare = result.elements
    assert value_of(inform, "text") == "Close it with </dial> or </dial>."
    assert value_of(declare, "payload") == {"x": "</dial-payload>"}
    assert result.issues == ()


def test_bug10_payloads_that_are_not_json_are_kept_and_type_is_read() -> None:
    result = envelope(
        "<dial><dial-inform><dial-payload type='text/csv'>a,b</dial-payload></dial-inform>"
        "<dial-inform><dial-payload>{oops}</dial-payload></dial-inform></dial>"
    )
    csv, broken = result.elements
    assert (value_of(csv, "payload_text"), value_of(csv, "payload_type")) == ("a,b", "text/csv")
    assert (value_of(broken, "payload"), value_of(broken, "payload_text")) == (None, "{oops}")
    assert codes(result) == ["invalid-json"]


def test_bug11_lang_multi_resume_interval_disabled_are_read() -> None:
    result = envelope(
        '<dial><dial-inform lang="fr">x</dial-inform><dial-suggest multi="1"/><dial-delegate resume="true"/>'
        '<dial-phatic interval="0.5"/>'
        '<dial-ask><dial-option disabled="1" default="1">A</dial-option></dial-ask></dial>'
    )
    inform, suggest, delegate, phatic, ask = result.elements
    assert inform.lang == "fr"
    assert value_of(suggest, "multi") is True
    assert value_of(delegate, "resume") is True
    assert value_of(phatic, "interval") == 0.5
    assert value_of(ask, "options") == (Option(value="A", label="A", default=True, disabled=True),)


def test_bug12_timeout_fractions_are_read() -> None:
    assert value_of(only('<dial-ask timeout="1.5">Q</dial-ask>'), "timeout") == 1.5


def test_bug13_delegate_text_excludes_context_and_payload_is_extracted() -> None:
    element = only(
        '<dial-delegate to="x">Go<dial-context><dial-payload>[1]</dial-payload></dial-context></dial-delegate>'
    )
    assert isinstance(element, Delegate)
    assert (element.text, element.payload, element.payload_text) == ("Go", [1], "[1]")


def test_bug14_ids_are_kept_as_written_and_no_element_is_dropped() -> None:
    result = envelope(
        '<dial><dial-inform id="">a</dial-inform><dial-inform id="">b</dial-inform><dial-inform/></dial>'
    )
    assert [element.id for element in result.elements] == ["", "", None]


def test_bug23_json_null_payload_differs_from_no_payload() -> None:
    result = envelope(
        "<dial><dial-suggest action='a'><dial-payload>null</dial-payload></dial-suggest>"
        "<dial-suggest action='b'/></dial>"
    )
    first, second = result.elements
    assert (value_of(first, "payload"), value_of(first, "payload_text")) == (None, "null")
    assert (value_of(second, "payload"), value_of(second, "payload_text")) == (None, None)


@pytest.mark.parametrize(
    "payload",
    ['{"a": "&lt;/dial-payload>"}', '<![CDATA[{"a": "</dial-payload>"}]]>'],
    ids=["escaped", "cdata"],
)
def test_bug25_payload_end_tag_inside_json_string(payload: str) -> None:
    element = only(f"<dial-inform>t<dial-payload>{payload}</dial-payload></dial-inform>")
    assert isinstance(element, Inform)
    assert (element.payload, element.text) == ({"a": "</dial-payload>"}, "t")


# ---------------------------------------------------------------------------------------------- extract_prose


@pytest.mark.parametrize(
    ("reply", "prose"),
    [
        ("Hello <dial><dial-inform>x</dial-inform></dial> bye", "Hello  bye"),
        ("  just text \n", "just text"),
        ("", ""),
        ("<dial></dial>", ""),
        ('<?xml version="1.0"?>\n<dial></dial>', '<?xml version="1.0"?>'),
        ("```xml\n<dial></dial>\n```", ""),  # a fence around the envelope is not prose
        ("Here you go:\n```xml\n<dial></dial>\n```\nAnything else?", "Here you go:\nAnything else?"),
        ("Here:\n```xml\n<dial></dial>", "Here:"),  # a fence left open
        ("Use ```x``` <dial></dial>", "Use ```x```"),  # inline, not a fence line
        ("Before\n<dial>\n<dial-inform>never closed", "Before"),
        ("a <dial/> b <dial></dial> c", "a  b <dial></dial> c"),
        ("<dialog>x</dialog>", "<dialog>x</dialog>"),
        ("x <dial><!-- </dial> --></dial> y", "x  y"),
    ],
)
def test_extract_prose(reply: str, prose: str) -> None:
    assert extract_prose(reply) == prose


# ---------------------------------------------------------------------------------------------- properties


@given(xml_text)
def test_inform_text_round_trips(text: str) -> None:
    element = only(f"<dial-inform>{escape_text(text)}</dial-inform>")
    assert value_of(element, "text") == (text.strip() or None)


@given(xml_text)
def test_attribute_values_round_trip(value: str) -> None:
    element = only(f'<dial-suggest action="{escape_attribute(value)}" id="{escape_attribute(value)}"/>')
    assert (element.id, value_of(element, "action")) == (value, value)


@given(json_values)
def test_json_payload_round_trips(value: Any) -> None:
    body = escape_text(json.dumps(value))
    element = only(f"<dial-declare><dial-payload>{body}</dial-payload></dial-declare>")
    assert value_of(element, "payload") == value


MARKUP = st.sampled_from(
    [
        "<dial>",
        "</dial>",
        "<dial/>",
        "<dial ",
        "<dial-inform>",
        "</dial-inform>",
        "<dial-ask>",
        "<dial-option value='v'/>",
        "<dial-payload>",
        "</dial-payload>",
        "<step>",
        "<!--",
        "-->",
        "<![CDATA[",
        "]]>",
        "<?",
        "?>",
        "<!DOCTYPE d [",
        "]>",
        "&",
        "&amp;",
        "&x;",
        "<",
        ">",
        '"',
        "'",
        "=",
        " id=",
        "{",
        "}",
        "\n",
        "text",
    ]
)


@given(st.lists(MARKUP | xml_text, max_size=30).map("".join))
@example("`<dial>`<dial>")  # the envelope's text stands earlier too, as prose in backticks
def test_any_reply_parses_without_raising(reply: str) -> None:
    result = parse(reply)
    prose = extract_prose(reply)
    if result is None:
        assert prose == reply.strip()
        return
    raw = result.raw
    # The envelope is one of the places its text stands (the same text may stand earlier as prose, in backticks).
    places = [at for at in range(len(reply)) if reply.startswith(raw, at)]
    assert places
    assert prose in {(reply[:at] + reply[at + len(raw) :]).strip() for at in places}
    assert result.prose == prose
    assert {issue.code for issue in result.issues} <= ISSUE_CODES
    if result.elements and not result.usable:  # the core takes an envelope with no issue as usable
        assert "empty-envelope" in {issue.code for issue in result.issues}
    for element in result.elements:
        assert type(element) is ELEMENT_TYPES[element.type]
        assert element.line is not None and 1 <= element.line <= reply.count("\n") + 1
