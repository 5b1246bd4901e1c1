"""The DIAL XSDs (lenient and strict) and ``validate``: the spec's examples pass, each kind of mistake is reported
with its line and a sentence that names the element and the attribute or child at fault."""

from __future__ import annotations

import functools
import time

import pytest
import xmlschema
from lxml import etree

from dial_runtime.language.schema import (
    SchemaIssue,
    describe_lxml_error,
    known_values,
    lxml_schema,
    speech_acts,
    validate,
    xsd_path,
)

XS = "{http://www.w3.org/2001/XMLSchema}"

EIGHT_ACTS = frozenset(
    {
        "dial-inform",
        "dial-ask",
        "dial-suggest",
        "dial-execute",
        "dial-acknowledge",
        "dial-declare",
        "dial-delegate",
        "dial-phatic",
    }
)

RENDERS = ("prose", "card-list", "table", "chart", "code", "media", "map", "diagram", "raw")
RESPONSE_TYPES = ("text", "choice", "confirm", "number", "file")

STRICT_ROOT = '<dial version="0.1" actor="agent">'


@functools.cache
def read_xsd(strict: bool) -> xmlschema.XMLSchema10:
    """The XSD as xmlschema reads it, once per test session."""
    return xmlschema.XMLSchema10(str(xsd_path(strict)))


def spec(body: str) -> str:
    """An envelope with the root attributes the strict schema requires."""
    return f"{STRICT_ROOT}\n{body}\n</dial>"


def bare(body: str) -> str:
    """An envelope as the runtime writes it: a bare <dial>."""
    return f"<dial>\n{body}\n</dial>"


# --------------------------------------------------------------------------------------------- valid examples

# The outcome reply exactly as SPEC-NOTES §4.7 writes it: bare <dial>, 2-space indent, acknowledge + declare.
OUTCOME_REPLY = (
    "<dial>\n"
    '  <dial-acknowledge of="sg-1" yield="sg-1:done">Done: Add the note \'Strong brand\'.</dial-acknowledge>\n'
    '  <dial-declare context-key="outcome:sg-1">\n'
    '    <dial-payload type="application/json">{"action":"add-note","status":"done","result":{"count":1}}'
    "</dial-payload>\n"
    "  </dial-declare>\n"
    '  <dial-acknowledge of="sg-2" yield="sg-2:failed">Couldn\'t do it: Do &lt;it&gt;.</dial-acknowledge>\n'
    '  <dial-declare context-key="outcome:sg-2">\n'
    '    <dial-payload type="application/json">{"action":"do","status":"failed","error":"\\u003cboom> & co"}'
    "</dial-payload>\n"
    "  </dial-declare>\n"
    "</dial>"
).replace(" & co", " &amp; co")

FULL_EXAMPLE = """<?xml version="1.0" encoding="UTF-8"?>
<dial version="0.1" turn="2" actor="agent" session="sess-garden-1">

  <!-- Put the garden into shared context -->
  <dial-declare id="ctx-garden" context-key="garden" yield="garden:set">
    <dial-payload type="application/json">{ "beds": 3, "soil": "loam" }</dial-payload>
  </dial-declare>

  <!-- Summary once the context is set -->
  <dial-inform id="summary" observe="garden:set" render="prose" yield="summary:shown">
    Three beds of loam: here is what grows well in them.
  </dial-inform>

  <dial-suggest id="plants" observe="summary:shown" render="card-list" action="plant" yield="plant:picked">
    <dial-payload type="application/json">[{ "name": "kale" }, { "name": "beans" }]</dial-payload>
  </dial-suggest>

  <dial-ask id="which-bed" observe="summary:shown" response-type="choice" yield="bed:chosen"
            addressed-to="human">
    Which bed first?
    <dial-option value="north">North bed</dial-option>
    <dial-option value="south" default="true">South bed</dial-option>
  </dial-ask>

</dial>
"""

# (id, document, also valid against the strict schema?)
VALID: list[tuple[str, str, bool]] = [
    (
        "root-every-attribute",
        '<dial version="0.1" turn="3" actor="agent" session="sess-abc">\n'
        "<dial-inform>hello</dial-inform>\n</dial>",
        True,
    ),
    ("root-actor-named-id", '<dial version="0.1" actor="billing-agent"><dial-inform>x</dial-inform></dial>', True),
    ("root-turn-zero", '<dial version="0.1" actor="human" turn="0"><dial-inform>x</dial-inform></dial>', True),
    ("root-turn-plus", '<dial version="0.1" actor="human" turn="+3"><dial-inform>x</dial-inform></dial>', True),
    (
        "inform-every-attribute",
        spec(
            '<dial-inform id="result" observe="job:done" yield="result:delivered result:logged" '
            'addressed-to="human" lang="pt-BR" render="prose">\n'
            "  The image was generated. Resolution: 1024×1024.\n"
            "</dial-inform>"
        ),
        True,
    ),
    (
        "inform-payload",
        spec(
            '<dial-inform id="list" render="card-list">\n'
            '  <dial-payload type="application/json">[{"id": "sku-1", "price": 129}]</dial-payload>\n'
            "</dial-inform>"
        ),
        True,
    ),
    (
        "inform-text-and-payload",
        spec('<dial-inform render="table">Totals:<dial-payload>{"a": 1}</dial-payload>as of today</dial-inform>'),
        True,
    ),
    (
        "inform-escapes-and-cdata",
        spec('<dial-inform render="code">if x &lt; y &amp;&amp; y &gt; 0: <![CDATA[a <b> c]]></dial-inform>'),
        True,
    ),
    (
        "ask-confirm-every-attribute",
        spec(
            '<dial-ask id="confirm-delete" observe="" response-type="confirm" timeout="30" '
            'yield="delete:confirmed delete:cancelled" addressed-to="human" lang="en">\n'
            "  Delete all 47 files? This cannot be undone.\n"
            "</dial-ask>"
        ),
        True,
    ),
    (
        "ask-choice-with-options",
        spec(
            '<dial-ask id="style" response-type="choice" yield="style:chosen" timeout="30">\n'
            "  Which style?\n"
            '  <dial-option value="photo" default="true">Photorealistic</dial-option>\n'
            '  <dial-option value="drawing" disabled="false">Illustration</dial-option>\n'
            '  <dial-option value="minimal" default="0" disabled="1">Minimalist</dial-option>\n'
            '  <dial-option value="none"/>\n'
            "</dial-ask>"
        ),
        True,
    ),
    ("ask-fractional-timeout", spec('<dial-ask response-type="number" timeout="1.5">How many?</dial-ask>'), True),
    ("ask-zero-timeout", spec('<dial-ask timeout="0">Now?</dial-ask>'), True),
    ("ask-self-closing", spec('<dial-ask id="q" response-type="file" yield="file:sent"/>'), True),
    (
        "suggest-every-attribute",
        spec(
            '<dial-suggest id="picks" observe="summary:shown" render="card-list" action="add-to-cart" '
            'multi="true" yield="item:selected item:dismissed" addressed-to="human" lang="en">\n'
            '  <dial-payload type="application/json" encoding="utf-8">[{"id": "sku-1"}]</dial-payload>\n'
            "</dial-suggest>"
        ),
        True,
    ),
    (
        "suggest-text-and-payload",
        spec(
            '<dial-suggest action="add-note">Add a note about the brand.\n'
            '  <dial-payload>{"text": "Strong brand"}</dial-payload>\n'
            "</dial-suggest>"
        ),
        True,
    ),
    (
        "suggest-text-only",
        bare('<dial-suggest action="add-note">Add a note about the brand.</dial-suggest>'),
        False,
    ),
    (
        "suggest-then-declare-bare-json",
        bare(
            '<dial-suggest action="add-note">Add a note.</dial-suggest>\n'
            '<dial-declare context-key="add-note">{"text": "Strong brand"}</dial-declare>'
        ),
        False,
    ),
    (
        "execute-with-steps",
        spec(
            '<dial-execute id="setup" observe="confirm:received" yield="setup:done setup:failed">\n'
            '  <step env="shell" id="make-dir" yield="dir:ready">mkdir -p /tmp/project</step>\n'
            '  <step env="shell" id="write" observe="dir:ready" yield="config:written" label="Write the config">\n'
            '    echo \'{"version": "1.0"}\' > /tmp/project/config.json &amp;&amp; pwd\n'
            "  </step>\n"
            '  <step env="python" id="check" observe="config:written">print(1 &lt; 2)</step>\n'
            '  <step env="http">GET https://example.com/health</step>\n'
            "  <step>ls</step>\n"
            "</dial-execute>"
        ),
        True,
    ),
    (
        "execute-step-env-extension",
        spec('<dial-execute><step env="mcp:github">list_issues</step></dial-execute>'),
        True,
    ),
    ("execute-empty", spec("<dial-execute/>"), True),
    (
        "acknowledge-every-attribute",
        spec(
            '<dial-acknowledge id="ack-upload" of="upload-request" yield="ack:sent" observe="upload:done" '
            'addressed-to="human" lang="en">Got it — processing your file now.</dial-acknowledge>'
        ),
        True,
    ),
    ("acknowledge-empty", spec('<dial-acknowledge of="x"/>'), True),
    (
        "declare-payload-every-attribute",
        spec(
            '<dial-declare id="set-artefact" context-key="active-artefact" yield="artefact:set">\n'
            '  <dial-payload type="application/json" encoding="utf-8" schema="https://example.com/a.schema.json">\n'
            '    { "slug": "campaign", "color": "#f97316" }\n'
            "  </dial-payload>\n"
            "</dial-declare>"
        ),
        True,
    ),
    (
        "declare-bare-json",
        bare('<dial-declare context-key="add-note">{"text": "Strong brand"}</dial-declare>'),
        False,
    ),
    (
        "declare-payload-csv",
        spec(
            '<dial-declare context-key="rows"><dial-payload type="text/csv">a,b\n1,2</dial-payload></dial-declare>'
        ),
        True,
    ),
    (
        "delegate-with-context",
        spec(
            '<dial-delegate id="handoff" to="billing-agent" intent="resolve-dispute" resume="true" '
            'yield="delegation:accepted delegation:rejected">\n'
            "  The user needs help with a March charge. Handing off to billing.\n"
            "  <dial-context>\n"
            '    <dial-payload type="application/json">{ "chargeId": "chg-1", "amount": 49.99 }</dial-payload>\n'
            "  </dial-context>\n"
            "</dial-delegate>"
        ),
        True,
    ),
    ("delegate-text-only", spec('<dial-delegate to="human">Over to you.</dial-delegate>'), True),
    ("phatic-typing", spec('<dial-phatic signal="typing" />'), True),
    (
        "phatic-heartbeat-interval",
        spec('<dial-phatic id="hb" signal="heartbeat" interval="30" yield="hb:1"/>'),
        True,
    ),
    ("phatic-fractional-interval", spec('<dial-phatic signal="presence" interval="0.5"/>'), True),
    ("phatic-session-complete", spec('<dial-phatic signal="session-complete"/>'), True),
    ("phatic-open-close-pair", spec('<dial-phatic signal="done-typing"></dial-phatic>'), True),
    ("phatic-with-text", bare('<dial-phatic signal="thinking"> hmm </dial-phatic>'), False),
    ("outcome-reply", OUTCOME_REPLY, False),
    ("outcome-reply-with-root-attributes", OUTCOME_REPLY.replace("<dial>", STRICT_ROOT, 1), True),
    ("full-example", FULL_EXAMPLE, True),
    ("bare-empty-dial", "<dial></dial>", False),
    ("bare-self-closing-dial", "<dial/>", False),
    ("bare-root-with-acts", bare('<dial-inform>hi</dial-inform>\n<dial-ask response-type="text"/>'), False),
    (
        "extension-attributes",
        '<dial version="0.1" actor="agent" x-trace="t1">\n'
        '<dial-inform data-source="search" render="prose">hi</dial-inform>\n'
        '<dial-ask ui-hint="wide" response-type="choice">'
        '<dial-option value="a" icon="star">A</dial-option></dial-ask>\n'
        '<dial-suggest action="x" score="0.9"><dial-payload version="2">{}</dial-payload></dial-suggest>\n'
        '<dial-execute retry="2"><step env="shell" sandbox="yes">ls</step></dial-execute>\n'
        '<dial-acknowledge mood="warm">ok</dial-acknowledge>\n'
        '<dial-declare context-key="k" scope="session"><dial-payload>1</dial-payload></dial-declare>\n'
        '<dial-delegate to="b" priority="high"><dial-context domain="billing">'
        "<dial-payload>{}</dial-payload></dial-context></dial-delegate>\n"
        '<dial-phatic signal="typing" until="later"/>\n'
        "</dial>",
        False,
    ),
    (
        "extension-attributes-namespaced",
        '<dial version="0.1" actor="agent" xmlns:x="urn:example:ext" x:trace="t1">\n'
        '<dial-inform x:source="search">hi</dial-inform>\n'
        '<dial-execute x:retry="2"><step x:sandbox="yes">ls</step></dial-execute>\n'
        "</dial>",
        True,
    ),
]


@pytest.mark.parametrize(("name", "document", "strict_too"), VALID, ids=[row[0] for row in VALID])
def test_spec_examples_are_valid(name: str, document: str, strict_too: bool) -> None:
    assert validate(document) == []
    strict_issues = validate(document, strict=True)
    if strict_too:
        assert strict_issues == []
    else:
        assert strict_issues, f"{name} is lenient-only, so the strict schema must reject it"


def test_lenient_only_examples_fail_strictly_for_the_documented_reasons() -> None:
    assert [i.message for i in validate(OUTCOME_REPLY, strict=True)] == [
        "dial: missing required attribute 'version'",
        "dial: missing required attribute 'actor'",
    ]
    declare = validate(spec('<dial-declare context-key="k">{"a": 1}</dial-declare>'), strict=True)
    assert [str(i) for i in declare] == [
        "line 2: dial-declare: text is not allowed here; put the value in a dial-payload "
        "(a bare JSON body is accepted by the lenient schema only)",
        "line 2: dial-declare: missing required child element 'dial-payload'",
    ]
    suggest = validate(spec('<dial-suggest action="a">Do it.</dial-suggest>'), strict=True)
    assert [i.message for i in suggest] == ["dial-suggest: missing required child element 'dial-payload'"]
    assert [i.message for i in validate("<dial/>", strict=True)] == [
        "dial: missing required attribute 'version'",
        "dial: missing required attribute 'actor'",
        "dial: missing a child element; expected one of dial-inform, dial-ask, dial-suggest, dial-execute, "
        "dial-acknowledge, dial-declare, dial-delegate, dial-phatic",
    ]


@pytest.mark.parametrize("render", RENDERS)
def test_every_render_value_is_valid_on_inform_and_suggest(render: str) -> None:
    document = spec(
        f'<dial-inform render="{render}">x</dial-inform>\n'
        f'<dial-suggest render="{render}"><dial-payload>{{}}</dial-payload></dial-suggest>'
    )
    assert validate(document, strict=True) == []


@pytest.mark.parametrize("response_type", RESPONSE_TYPES)
def test_every_response_type_is_valid(response_type: str) -> None:
    assert validate(spec(f'<dial-ask response-type="{response_type}">Q?</dial-ask>'), strict=True) == []


@pytest.mark.parametrize("signal", ["typing", "thinking", "heartbeat", "presence", "done-typing", "scene-ready"])
def test_every_listed_signal_and_an_extension_are_valid(signal: str) -> None:
    assert validate(spec(f'<dial-phatic signal="{signal}"/>'), strict=True) == []


@pytest.mark.parametrize("env", ["shell", "python", "http", "mcp:github", "sim:physics", "monitor"])
def test_step_envs_are_extensible(env: str) -> None:
    assert validate(spec(f'<dial-execute><step env="{env}">x</step></dial-execute>'), strict=True) == []


@pytest.mark.parametrize("actor", ["human", "agent", "system", "service", "billing-agent"])
def test_root_actors_are_extensible(actor: str) -> None:
    assert validate(f'<dial version="0.1" actor="{actor}"><dial-inform/></dial>', strict=True) == []


# --------------------------------------------------------------------------------------------- invalid documents

LENIENT, STRICT, BOTH = (False,), (True,), (False, True)

# (id, document, the modes (strict?) in which it is invalid, expected line, expected message or message start)
INVALID: list[tuple[str, str, tuple[bool, ...], int, str]] = [
    (
        "wrong-render",
        spec('<dial-inform>ok</dial-inform>\n<dial-inform render="sparkles">x</dial-inform>'),
        STRICT,
        3,
        "dial-inform: attribute 'render' must be one of prose, card-list, table, chart, code, media, map, "
        "diagram, raw; got 'sparkles'",
    ),
    (
        "wrong-response-type",
        spec('<dial-ask response-type="maybe">Q?</dial-ask>'),
        STRICT,
        2,
        "dial-ask: attribute 'response-type' must be one of text, choice, confirm, number, file; got 'maybe'",
    ),
    (
        "missing-context-key",
        spec("<dial-declare>\n<dial-payload>{}</dial-payload>\n</dial-declare>"),
        STRICT,
        2,
        "dial-declare: missing required attribute 'context-key'",
    ),
    (
        "missing-to",
        spec("<dial-delegate>Over to billing.</dial-delegate>"),
        STRICT,
        2,
        "dial-delegate: missing required attribute 'to'",
    ),
    ("missing-signal", spec("<dial-phatic/>"), STRICT, 2, "dial-phatic: missing required attribute 'signal'"),
    (
        "missing-option-value",
        spec('<dial-ask response-type="choice">Pick\n<dial-option>A</dial-option>\n</dial-ask>'),
        STRICT,
        3,
        "dial-option: missing required attribute 'value'",
    ),
    (
        "missing-version",
        '<dial actor="agent">\n<dial-inform/>\n</dial>',
        STRICT,
        1,
        "dial: missing required attribute 'version'",
    ),
    (
        "missing-actor",
        '<dial version="0.1">\n<dial-inform/>\n</dial>',
        STRICT,
        1,
        "dial: missing required attribute 'actor'",
    ),
    (
        "wrong-version",
        '<dial version="0.2" actor="agent"><dial-inform/></dial>',
        STRICT,
        1,
        "dial: attribute 'version' must be '0.1'; got '0.2'",
    ),
    (
        "empty-actor",
        '<dial version="0.1" actor=""><dial-inform/></dial>',
        STRICT,
        1,
        "dial: attribute 'actor' must be a non-empty name: human, agent, system, service or another actor id; "
        "got ''",
    ),
    (
        "option-inside-inform",
        spec('<dial-inform>Pick one\n<dial-option value="a">A</dial-option>\n</dial-inform>'),
        BOTH,
        3,
        "dial-inform: unexpected child element 'dial-option' (dial-option belongs inside dial-ask)",
    ),
    (
        "step-outside-execute",
        spec("<dial-inform/>\n<step>ls</step>"),
        BOTH,
        3,
        "dial: unexpected child element 'step' (step belongs inside dial-execute)",
    ),
    (
        "payload-at-top-level",
        spec("<dial-payload>{}</dial-payload>"),
        BOTH,
        2,
        "dial: unexpected child element 'dial-payload' (dial-payload belongs inside dial-inform, dial-suggest, "
        "dial-declare or dial-context)",
    ),
    (
        "context-at-top-level",
        spec("<dial-context><dial-payload>{}</dial-payload></dial-context>"),
        BOTH,
        2,
        "dial: unexpected child element 'dial-context' (dial-context belongs inside dial-delegate)",
    ),
    (
        "unknown-element",
        spec("<dial-inform/>\n\n<dial-foo>x</dial-foo>"),
        BOTH,
        4,
        "dial: unexpected child element 'dial-foo' (not a DIAL element; dial holds dial-inform, dial-ask, "
        "dial-suggest, dial-execute, dial-acknowledge, dial-declare, dial-delegate or dial-phatic)",
    ),
    (
        "act-inside-act",
        spec("<dial-execute>\n<dial-inform>x</dial-inform>\n</dial-execute>"),
        BOTH,
        3,
        "dial-execute: unexpected child element 'dial-inform' (a speech act goes directly inside dial)",
    ),
    (
        "two-payloads",
        spec("<dial-inform>\n<dial-payload>1</dial-payload>\n<dial-payload>2</dial-payload>\n</dial-inform>"),
        BOTH,
        4,
        "dial-inform: unexpected child element 'dial-payload' (at most one dial-payload is allowed here)",
    ),
    (
        "markup-inside-acknowledge",
        spec("<dial-acknowledge>Done <b>now</b></dial-acknowledge>"),
        BOTH,
        2,
        "dial-acknowledge: unexpected child element 'b'; dial-acknowledge holds text only",
    ),
    (
        "text-inside-execute",
        spec("<dial-execute>run these:\n<step>ls</step></dial-execute>"),
        BOTH,
        2,
        "dial-execute: text is not allowed here; dial-execute holds only step elements",
    ),
    (
        "text-between-acts",
        spec("<dial-inform/>\nsome prose\n<dial-inform/>"),
        BOTH,
        1,
        "dial: text is not allowed here; dial holds only speech-act elements",
    ),
    (
        "bad-boolean-multi",
        spec('<dial-suggest multi="yes"><dial-payload>{}</dial-payload></dial-suggest>'),
        BOTH,
        2,
        "dial-suggest: attribute 'multi' must be true, false, 1 or 0; got 'yes'",
    ),
    (
        "bad-boolean-default",
        spec(
            '<dial-ask response-type="choice">\n<dial-option value="a" default="True">A</dial-option>\n</dial-ask>'
        ),
        BOTH,
        3,
        "dial-option: attribute 'default' must be true, false, 1 or 0; got 'True'",
    ),
    (
        "bad-boolean-resume",
        spec('<dial-delegate to="x" resume="no"/>'),
        BOTH,
        2,
        "dial-delegate: attribute 'resume' must be true, false, 1 or 0; got 'no'",
    ),
    (
        "non-numeric-timeout",
        spec('<dial-ask timeout="soon">Q?</dial-ask>'),
        BOTH,
        2,
        "dial-ask: attribute 'timeout' must be a number of seconds, 0 or more (such as 30 or 1.5); got 'soon'",
    ),
    (
        "exponent-timeout",
        spec('<dial-ask timeout="1e3">Q?</dial-ask>'),
        BOTH,
        2,
        "dial-ask: attribute 'timeout' must be a number of seconds, 0 or more (such as 30 or 1.5); got '1e3'",
    ),
    (
        "negative-timeout",
        spec('<dial-ask timeout="-5">Q?</dial-ask>'),
        BOTH,
        2,
        "dial-ask: attribute 'timeout' must be 0 or more; got '-5'",
    ),
    (
        "non-numeric-interval",
        spec('<dial-phatic signal="heartbeat" interval="often"/>'),
        BOTH,
        2,
        "dial-phatic: attribute 'interval' must be a number of seconds, 0 or more (such as 30 or 1.5); "
        "got 'often'",
    ),
    (
        "negative-turn",
        '<dial turn="-1">\n<dial-inform/></dial>',
        BOTH,
        1,
        "dial: attribute 'turn' must be a whole number from 0 to 4294967295; got '-1'",
    ),
    (
        "fractional-turn",
        '<dial turn="1.5"/>',
        BOTH,
        1,
        "dial: attribute 'turn' must be a whole number from 0 to 4294967295; got '1.5'",
    ),
    (
        "huge-turn",
        '<dial turn="4294967296"/>',
        BOTH,
        1,
        "dial: attribute 'turn' must be a whole number from 0 to 4294967295; got '4294967296'",
    ),
    (
        "empty-env",
        spec('<dial-execute><step env="">ls</step></dial-execute>'),
        STRICT,
        2,
        "step: attribute 'env' must be a non-empty name: shell, python, http or another name such as mcp:github; "
        "got ''",
    ),
    (
        "bad-lang",
        spec('<dial-inform lang="not a tag">x</dial-inform>'),
        STRICT,
        2,
        "dial-inform: attribute 'lang' must be a BCP-47 language tag such as en or pt-BR; got 'not a tag'",
    ),
    (
        "unknown-attribute-strict",
        spec('<dial-inform data-source="x">x</dial-inform>'),
        STRICT,
        2,
        "dial-inform: unknown attribute 'data-source' is not allowed here",
    ),
    (
        "duplicate-act-id",
        spec('<dial-inform id="a"/>\n<dial-ask id="a"/>'),
        STRICT,
        3,
        "dial-ask: duplicate id 'a'; ids must be unique within the envelope",
    ),
    (
        "duplicate-step-id",
        spec('<dial-execute>\n<step id="s">a</step>\n<step id="s">b</step>\n</dial-execute>'),
        STRICT,
        4,
        "step: duplicate id 's'; ids must be unique within its dial-execute",
    ),
    (
        "text-inside-phatic-strict",
        spec('<dial-phatic signal="typing">typing…</dial-phatic>'),
        STRICT,
        2,
        "dial-phatic: text is not allowed here; dial-phatic must be empty (write it self-closing)",
    ),
    (
        "context-without-payload-strict",
        spec('<dial-delegate to="x">\n<dial-context/>\n</dial-delegate>'),
        STRICT,
        3,
        "dial-context: missing required child element 'dial-payload'",
    ),
    (
        "root-is-not-dial",
        '<dial-inform render="prose">x</dial-inform>',
        BOTH,
        1,
        "dial-inform: the root element of a DIAL document must be 'dial'",
    ),
    (
        "namespaced-root",
        '<dial xmlns="urn:example:dial" version="0.1" actor="agent"><dial-inform/></dial>',
        BOTH,
        1,
        "dial: DIAL elements have no XML namespace; the root is in namespace 'urn:example:dial'",
    ),
    (
        "raw-ampersand",
        spec("<dial-execute>\n<step>cd /tmp && pwd</step>\n</dial-execute>"),
        BOTH,
        3,
        "not well-formed XML (column 16): a raw '&' in text or in an attribute value; write it as &amp;",
    ),
    (
        "raw-less-than",
        spec("<dial-inform>\nif a < b</dial-inform>"),
        BOTH,
        3,
        "not well-formed XML (column 7): a raw '<' that does not start a tag; write it as &lt;",
    ),
    (
        "mismatched-tags",
        spec("<dial-inform>\nx</dial-ask>"),
        BOTH,
        3,
        "not well-formed XML (column 13): Opening and ending tag mismatch: dial-inform line 2 and dial-ask",
    ),
    (
        "unclosed-envelope",
        "<dial>\n<dial-inform>x</dial-inform>\n<dial-ask>Q",
        BOTH,
        3,
        "not well-formed XML",
    ),
    (
        "prose-around-envelope",
        "Here you go:\n<dial><dial-inform/></dial>",
        BOTH,
        1,
        "not well-formed XML (column 1): the text does not start with an element; a DIAL document is one <dial> "
        "envelope with no prose around it",
    ),
    (
        "two-envelopes",
        "<dial/>\n<dial/>",
        BOTH,
        2,
        "not well-formed XML (column 1): content after the end of the root element",
    ),
    ("empty-text", "", BOTH, 1, "not well-formed XML (column 1): the text holds no XML element"),
    ("duplicate-attribute", '<dial>\n<dial-inform id="a" id="b"/></dial>', BOTH, 2, "not well-formed XML"),
]


@pytest.mark.parametrize(
    ("name", "document", "modes", "line", "expected"), INVALID, ids=[row[0] for row in INVALID]
)
def test_invalid_documents_are_reported_with_line_and_reason(
    name: str, document: str, modes: tuple[bool, ...], line: int, expected: str
) -> None:
    for strict in (False, True):
        issues = validate(document, strict=strict)
        if strict not in modes:
            assert issues == [], f"{name} must be valid when strict={strict}: {issues}"
            continue
        assert issues, f"{name} must be invalid when strict={strict}"
        assert all(isinstance(issue, SchemaIssue) for issue in issues)
        matching = [issue for issue in issues if issue.message.startswith(expected)]
        assert matching, f"no issue starts with {expected!r}: {[str(i) for i in issues]}"
        assert matching[0].line == line
        assert str(matching[0]) == f"line {line}: {matching[0].message}"


def test_the_three_pinned_kinds_of_message() -> None:
    wrong_enum = validate(spec('<dial-ask response-type="maybe"/>'), strict=True)
    assert [i.message for i in wrong_enum] == [
        "dial-ask: attribute 'response-type' must be one of text, choice, confirm, number, file; got 'maybe'"
    ]
    missing = validate(
        spec('<dial-declare><dial-payload type="application/json">{}</dial-payload></dial-declare>'), strict=True
    )
    assert [i.message for i in missing] == ["dial-declare: missing required attribute 'context-key'"]
    misplaced = validate(bare('<dial-inform>x<dial-option value="a">A</dial-option></dial-inform>'))
    assert len(misplaced) == 1
    assert misplaced[0].message.startswith("dial-inform: unexpected child element 'dial-option'")
    assert misplaced[0].path == "/dial/dial-inform/dial-option"
    assert misplaced[0].line == 2


def test_problems_after_an_unexpected_element_are_still_reported() -> None:
    # libxml2 stops checking <dial>'s children at the first unexpected one; validate() looks again without it.
    document = spec(
        "<step>ls</step>\n"
        '<dial-ask response-type="maybe"/>\n'
        "<dial-foo/>\n"
        "<dial-declare><dial-payload>{}</dial-payload></dial-declare>\n"
        '<dial-inform id="x"/>\n'
        '<dial-inform id="x"/>'
    )
    issues = validate(document, strict=True)
    assert [(i.line, i.message.split(" (")[0]) for i in issues] == [
        (2, "dial: unexpected child element 'step'"),
        (3, "dial-ask: attribute 'response-type' must be one of text, choice, confirm, number, file; got 'maybe'"),
        (4, "dial: unexpected child element 'dial-foo'"),
        (5, "dial-declare: missing required attribute 'context-key'"),
        (7, "dial-inform: duplicate id 'x'; ids must be unique within the envelope"),
    ]
    # Paths are those of the document as written, not of the copy with the unexpected elements taken out.
    assert [i.path for i in issues] == [
        "/dial/step",
        "/dial/dial-ask",
        "/dial/dial-foo",
        "/dial/dial-declare",
        "/dial/dial-inform[2]",
    ]


def test_many_unexpected_elements_end_with_a_note() -> None:
    document = bare("\n".join("<x/>" for _ in range(100)))
    issues = validate(document)
    assert len(issues) == 65
    assert issues[0].message.startswith("dial: unexpected child element 'x' (not a DIAL element; dial holds ")
    assert issues[-1] == SchemaIssue(
        line=None,
        path=None,
        message="stopped after 64 rounds of unexpected elements; there may be more problems than these",
    )
    assert str(issues[-1]) == issues[-1].message


def test_each_syntax_error_is_one_issue_with_its_line() -> None:
    issues = validate("<dial>\n<dial-execute>\n<step>a && b</step>\n</dial-execute>\n</dial>")
    assert [(i.line, i.path) for i in issues] == [(3, None), (3, None)]  # one per raw '&'
    assert all("write it as &amp;" in i.message for i in issues)


def test_the_parser_is_hardened() -> None:
    bomb = (
        '<!DOCTYPE dial [<!ENTITY a "aaaaaaaaaaaaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">'
        '<!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">'
        '<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">'
        "]><dial><dial-inform>&e;&e;&e;&e;</dial-inform></dial>"
    )
    external = (
        '<!DOCTYPE dial [<!ENTITY x SYSTEM "file:///etc/hostname">]><dial><dial-inform>&x;</dial-inform></dial>'
    )
    started = time.perf_counter()
    bomb_issues = validate(bomb)
    assert time.perf_counter() - started < 1.0
    # libxml2 refuses the amplification outright, or the DOCTYPE is reported: either way, nothing expands.
    assert len(bomb_issues) == 1
    assert "amplification" in bomb_issues[0].message or "DOCTYPE" in bomb_issues[0].message
    assert [i.message for i in validate(external)] == [
        "the document has a DOCTYPE declaration; DIAL takes none and its entities are not expanded"
    ]


def test_text_with_an_encoding_declaration_and_odd_characters() -> None:
    latin = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<dial><dial-inform>café — ok</dial-inform></dial>'
    assert validate(latin) == []
    lone_surrogate = validate("<dial>\ud800</dial>")
    assert len(lone_surrogate) == 1 and lone_surrogate[0].message.startswith("not well-formed XML")
    control = validate("<dial>\x01</dial>")
    assert len(control) == 1 and control[0].line == 1


def test_schema_issue_string_forms() -> None:
    issue = SchemaIssue(line=4, path="/dial/dial-ask", message="dial-ask: missing required attribute 'x'")
    assert str(issue) == "line 4: dial-ask: missing required attribute 'x'"
    assert str(SchemaIssue(line=None, path=None, message="m")) == "m"


# --------------------------------------------------------------------------------------------- the parser's hook


def test_lxml_schema_is_cached_and_validates_parsed_trees() -> None:
    assert lxml_schema() is lxml_schema(False) is lxml_schema(strict=False)
    assert lxml_schema(True) is lxml_schema(strict=True)
    assert lxml_schema() is not lxml_schema(True)
    tree = etree.fromstring(OUTCOME_REPLY.encode()).getroottree()
    assert lxml_schema().validate(tree)
    assert not lxml_schema(strict=True).validate(tree)


def test_describe_lxml_error_translates_the_error_log() -> None:
    document = spec(
        '<dial-ask response-type="maybe"/>\n'
        "<dial-declare><dial-payload>{}</dial-payload></dial-declare>\n"
        "<dial-acknowledge>a <b>c</b></dial-acknowledge>"
    )
    root = etree.fromstring(document.encode())
    schema = lxml_schema(strict=True)
    assert not schema.validate(root)
    entries = list(schema.error_log)
    messages = [describe_lxml_error(entry, root=root) for entry in entries]
    assert messages == [
        "dial-ask: attribute 'response-type' must be one of text, choice, confirm, number, file; got 'maybe'",
        "dial-declare: missing required attribute 'context-key'",
        "dial-acknowledge: unexpected child element 'b'; dial-acknowledge holds text only (write a literal '<' as "
        "&lt;)",
    ]
    # Without the tree, the child of a text-only element cannot be named, but the sentence still reads.
    assert describe_lxml_error(entries[2]) == (
        "dial-acknowledge: child elements are not allowed; dial-acknowledge holds text only "
        "(write a literal '<' as &lt;)"
    )


# --------------------------------------------------------------------------------------------- the XSD files


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_both_xsds_compile_in_lxml_and_xmlschema(strict: bool) -> None:
    path = xsd_path(strict)
    assert path.is_file()
    assert path.name == ("dial-strict.xsd" if strict else "dial-lenient.xsd")
    etree.XMLSchema(etree.parse(str(path)))
    schema = xmlschema.XMLSchema10(str(path))
    assert schema.target_namespace == ""
    assert set(schema.elements) == EIGHT_ACTS | {"dial"}


def test_speech_acts_are_exactly_the_eight() -> None:
    assert speech_acts() == EIGHT_ACTS
    assert isinstance(speech_acts(), frozenset)


def test_known_values_come_from_the_xsd() -> None:
    assert known_values("render") == RENDERS
    assert known_values("response-type") == RESPONSE_TYPES
    assert known_values("signal") == ("typing", "thinking", "heartbeat", "presence", "done-typing")
    assert known_values("env") == ("shell", "python", "http")
    assert known_values("actor") == ("human", "agent", "system", "service")
    assert known_values("no-such-type") == ()
    assert known_values("seconds") == ()


DEFAULTS = [
    ("dial-inform", "render", "prose"),
    ("dial-inform", "lang", "en"),
    ("dial-suggest", "render", "card-list"),
    ("dial-suggest", "multi", "false"),
    ("dial-ask", "response-type", "text"),
    ("dial-delegate", "resume", "false"),
    ("dial-inform/dial-payload", "type", "application/json"),
    ("dial-inform/dial-payload", "encoding", "utf-8"),
    ("dial-suggest/dial-payload", "type", "application/json"),
    ("dial-declare/dial-payload", "encoding", "utf-8"),
    ("dial-delegate/dial-context/dial-payload", "type", "application/json"),
    ("dial-ask/dial-option", "default", "false"),
    ("dial-ask/dial-option", "disabled", "false"),
    ("dial-execute/step", "env", "shell"),
] + [(act, "lang", "en") for act in sorted(EIGHT_ACTS)]


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
@pytest.mark.parametrize(("element", "attribute", "default"), DEFAULTS)
def test_defaults_are_declared(strict: bool, element: str, attribute: str, default: str) -> None:
    schema = read_xsd(strict)
    declaration = schema.find(element)
    assert declaration is not None, element
    assert declaration.attributes[attribute].default == default


BASE_ATTRIBUTES = {"id", "observe", "yield", "addressed-to", "lang"}
OWN_ATTRIBUTES = {
    "dial-inform": {"render"},
    "dial-ask": {"response-type", "timeout"},
    "dial-suggest": {"render", "action", "multi"},
    "dial-execute": set(),
    "dial-acknowledge": {"of"},
    "dial-declare": {"context-key"},
    "dial-delegate": {"to", "intent", "resume"},
    "dial-phatic": {"signal", "interval"},
    "dial": {"version", "turn", "actor", "session"},
    "dial-inform/dial-payload": {"type", "encoding", "schema"},
    "dial-ask/dial-option": {"value", "default", "disabled"},
    "dial-delegate/dial-context": set(),
    "dial-execute/step": {"env", "id", "label", "observe", "yield"},
}


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
@pytest.mark.parametrize("element", sorted(OWN_ATTRIBUTES))
def test_every_element_declares_the_spec_attributes(strict: bool, element: str) -> None:
    schema = read_xsd(strict)
    declaration = schema.find(element)
    expected = OWN_ATTRIBUTES[element] | (BASE_ATTRIBUTES if element in EIGHT_ACTS else set())
    declared = {name for name in declaration.attributes if name is not None}
    assert declared == expected


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_every_element_has_a_one_line_documentation(strict: bool) -> None:
    tree = etree.parse(str(xsd_path(strict)))
    elements = tree.iter(f"{XS}element")
    named = [element for element in elements if element.get("name")]
    assert {element.get("name") for element in named} == EIGHT_ACTS | {
        "dial",
        "dial-payload",
        "dial-option",
        "dial-context",
        "step",
    }
    for element in named:
        documentation = element.find(f"{XS}annotation/{XS}documentation")
        assert documentation is not None and (documentation.text or "").strip(), element.get("name")


def test_strict_suggest_documents_that_it_allows_text() -> None:
    schema = read_xsd(True)
    suggest = schema.elements["dial-suggest"]
    assert suggest.type.mixed
    documentation = " ".join(suggest.annotation.documentation[0].text.split())
    assert "text around the payload is allowed" in documentation.lower()
