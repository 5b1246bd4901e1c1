"""Grammars for constrained replies: every sentence the grammar of a domain admits is a ``<dial>`` envelope valid
against the lenient XSD, and every suggestion's payload in it is valid against its action's JSON Schema.

The sentences are drawn by a random walk over the grammar's own rule tree (the same tree that is rendered to GBNF),
with Hypothesis choosing the schemas and the walk's random choices; the end-to-end test against llama.cpp's server
checks that the GBNF text is what llama.cpp reads.
"""

from __future__ import annotations

import json
import random
import time
from typing import Annotated, Any, ClassVar, Literal

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dial_runtime import ActionSpec, parse
from dial_runtime.language.records import AskElement, Inform, Suggest
from dial_runtime.language.schema import validate
from dial_runtime.llm.grammar import (
    MAX_GRAMMAR_RULES,
    MAX_SCHEMA_DEPTH,
    Chars,
    Choice,
    Grammar,
    Node,
    Ref,
    Repeat,
    Sequence,
    domain_grammar,
    schema_rules,
    speech_acts,
)
from dial_runtime.llm.grammar import Literal as Text

#: Characters a negated class is drawn from: ASCII and a few that XML, JSON or UTF-8 treat specially.
POOL = [chr(code) for code in range(128)] + list("é中😀\u2028\u3000\xa0\x85\ufffd\ufffe\uffff\U0010fffd")
#: Past this depth a walk takes the simplest way out: the first option, the fewest repetitions.
DEPTH = 10


def sample(grammar: Grammar, rng: random.Random) -> str:
    """One sentence of ``grammar``, drawn at random."""
    out: list[str] = []

    def walk(node: Node, depth: int) -> None:
        if isinstance(node, Text):
            out.append(node.text)
        elif isinstance(node, Chars):
            out.append(draw_char(node, rng))
        elif isinstance(node, Ref):
            walk(grammar.rules[node.name], depth + 1)
        elif isinstance(node, Sequence):
            for item in node.items:
                walk(item, depth)
        elif isinstance(node, Choice):
            walk(node.options[0] if depth > DEPTH else rng.choice(node.options), depth + 1)
        else:
            # The bounds themselves, and a few in between; the upper bound only near the top, where it is cheap.
            most = node.least + 3 if node.most is None else node.most
            near = min(most, node.least + 2)
            count = node.least if depth > DEPTH else rng.choice([node.least, near, most if depth < 6 else near])
            for _ in range(count):
                walk(node.item, depth + 1)

    walk(grammar.rules["root"], 0)
    return "".join(out)


def draw_char(node: Chars, rng: random.Random) -> str:
    def inside(character: str) -> bool:
        return any(low <= ord(character) <= high for low, high in node.ranges)

    if node.negated:
        return rng.choice([character for character in POOL if not inside(character)])
    low, high = rng.choice(node.ranges)
    return chr(rng.randint(low, high))


class SchemaDomain:
    """One action whose payload schema is given, one read-only action without a schema."""

    def __init__(self, schema: Any) -> None:
        self.actions = {"do-it": ActionSpec(mutates=True), "look": ActionSpec(mutates=False)}
        self.vocabulary = {"do-it": {"schema": schema, "description": "Does it."}}


def check_reply(text: str, schemas: dict[str, Any]) -> None:
    """``text`` validates against the lenient XSD, and each suggestion's payload against its action's schema."""
    assert validate(text) == [], text
    envelope = parse(text)
    assert envelope is not None and envelope.elements and not envelope.issues, text
    for element in envelope.elements:
        if isinstance(element, (Inform, Suggest, AskElement)):
            assert element.text is not None and element.text.strip(), text  # something a person can read
        if isinstance(element, Suggest):
            assert element.action in schemas, text
            assert element.payload_text is not None and json.loads(element.payload_text) == element.payload, text
            if schemas[element.action] is not None:
                jsonschema.validate(element.payload, schemas[element.action])


# ---------------------------------------------------------------------------------------------- schemas

NAMES = st.text(alphabet=st.sampled_from('abz_-<&"é 中'), min_size=1, max_size=6)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=6), st.sampled_from(["<&>", "\ufffe"])
)


def leaves() -> st.SearchStrategy[dict[str, Any]]:
    lengths = st.tuples(st.integers(0, 4), st.integers(0, 12))
    return st.one_of(
        st.sampled_from(["string", "integer", "number", "boolean", "null"]).map(lambda kind: {"type": kind}),
        lengths.map(lambda bounds: {"type": "string", "minLength": bounds[0], "maxLength": sum(bounds)}),
        st.lists(SCALARS, min_size=1, max_size=4, unique_by=json.dumps).map(lambda values: {"enum": values}),
        SCALARS.map(lambda value: {"const": value}),
        st.sampled_from(["string", "integer", "boolean"]).map(lambda kind: {"type": [kind, "null"]}),
    )


def composed(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.dictionaries(NAMES, inner, min_size=0, max_size=4).flatmap(
        lambda properties: (
            st.lists(st.sampled_from(sorted(properties)), unique=True).map(
                lambda required: {"type": "object", "properties": properties, "required": required}
            )
            if properties
            else st.just({"type": "object"})
        )
    )
    arrays = st.tuples(inner, st.integers(0, 3), st.integers(0, 3)).map(
        lambda parts: {"type": "array", "items": parts[0], "minItems": parts[1], "maxItems": parts[1] + parts[2]}
    )
    return st.one_of(
        objects, arrays, st.lists(inner, min_size=1, max_size=3).map(lambda options: {"anyOf": options})
    )


SCHEMAS = st.recursive(leaves(), composed, max_leaves=10)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, rng=st.randoms(use_true_random=False))
def test_every_reply_the_grammar_admits_is_valid_dial_with_valid_payloads(schema: Any, rng: random.Random) -> None:
    grammar = domain_grammar(SchemaDomain(schema), max_text=12, max_string=10)
    assert grammar.approximations == ()
    for _ in range(4):
        check_reply(sample(grammar, rng), {"do-it": schema, "look": None})


class Item(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=20)]
    tags: list[str] = []


class Order(msgspec.Struct):
    items: Annotated[list[Item], msgspec.Meta(min_length=1, max_length=3)]
    priority: Literal["low", "high"]
    note: str | None = None
    parent: Order | None = None


#: Schemas as typed domains and MCP servers write them, and the places where the grammar is looser.
SHAPES = [
    pytest.param(msgspec.json.schema(Order), (), id="msgspec-struct-with-refs"),
    pytest.param(
        {"type": "object", "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}},
        (),
        id="one-of-disjoint",
    ),
    pytest.param({"type": "string", "nullable": True, "maxLength": 3}, (), id="openapi-nullable"),
    pytest.param({"type": "object", "properties": {}, "additionalProperties": False}, (), id="empty-object"),
    pytest.param(
        {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}, "required": ["when"]},
        ("do-it#/properties/when: format not enforced",),
        id="format",
    ),
    pytest.param({"type": "integer", "minimum": 1}, ("do-it#: minimum not enforced",), id="numeric-bounds"),
    pytest.param(
        {"$ref": "https://example.test/s.json"},
        ("do-it#: $ref 'https://example.test/s.json' is not a local definition",),
        id="remote-ref",
    ),
    pytest.param({"allOf": [{"type": "string"}]}, ("do-it#: no type",), id="all-of"),
]


@pytest.mark.parametrize(("schema", "approximations"), SHAPES)
@settings(max_examples=25, deadline=None)
@given(rng=st.randoms(use_true_random=False))
def test_real_world_schemas_and_where_the_grammar_is_looser(
    schema: Any, approximations: tuple[str, ...], rng: random.Random
) -> None:
    grammar = domain_grammar(SchemaDomain(schema), max_text=12)
    assert grammar.approximations == approximations
    openapi = {"anyOf": [{**schema, "nullable": False}, {"type": "null"}]} if schema.get("nullable") else schema
    for _ in range(4):
        text = sample(grammar, rng)
        check_reply(text, {"do-it": None if approximations else openapi, "look": None})


def test_the_grammar_writes_the_registrys_speech_acts_and_the_domains_actions() -> None:
    grammar = domain_grammar(SchemaDomain({"type": "object"}))
    written = {f"dial-{name}" for name in ("inform", "ask", "suggest", "phatic")}
    assert written <= speech_acts()
    gbnf = grammar.gbnf
    assert gbnf.startswith('root ::= "<dial>"')
    assert '<dial-suggest action=\\"do-it\\">' in gbnf and '<dial-suggest action=\\"look\\">' in gbnf


class Sizes:
    """Two actions whose schemas each define a ``Size``, differently."""

    actions: ClassVar[dict[str, ActionSpec]] = {
        "shirt": ActionSpec(mutates=True),
        "shoe": ActionSpec(mutates=True),
    }
    vocabulary: ClassVar[dict[str, Any]] = {
        "shirt": {"schema": {"$ref": "#/$defs/Size", "$defs": {"Size": {"enum": ["S", "M"]}}}},
        "shoe": {"schema": {"$ref": "#/$defs/Size", "$defs": {"Size": {"type": "integer"}}}},
    }


@settings(max_examples=25, deadline=None)
@given(rng=st.randoms(use_true_random=False))
def test_definitions_of_one_name_in_two_schemas_stay_apart(rng: random.Random) -> None:
    grammar = domain_grammar(Sizes(), max_text=8)
    schemas = {name: entry["schema"] for name, entry in Sizes.vocabulary.items()}
    for _ in range(4):
        check_reply(sample(grammar, rng), schemas)


def test_a_domain_without_actions_suggests_nothing() -> None:
    class Quiet:
        actions: ClassVar[dict[str, ActionSpec]] = {}

    grammar = domain_grammar(Quiet())
    assert "suggest" not in grammar.rules and "dial-suggest" not in grammar.gbnf


@pytest.mark.parametrize(
    ("node", "gbnf"),
    [
        (Text('say "hi"\n\\'), '"say \\"hi\\"\\n\\\\"'),
        (Text("\x01é"), '"\\x01é"'),
        (Chars(((0x30, 0x39), (0x2D, 0x2D), (0x5D, 0x5D))), "[0-9\\-\\]]"),
        (Chars(((0x00, 0x1F), (0xFFFE, 0xFFFF)), negated=True), "[^\\x00-\\x1F\\uFFFE-\\uFFFF]"),
        (Repeat(Ref("x"), 0, 1), "x?"),
        (Repeat(Ref("x"), 1, None), "x+"),
        (Repeat(Ref("x"), 2, 2), "x{2}"),
        (Repeat(Sequence((Ref("a"), Ref("b"))), 0, 3), "(a b){0,3}"),
        (Repeat(Sequence((Repeat(Ref("a"), 0, 1),)), 1, 2), "(a?){1,2}"),
        (Choice((Ref("a"), Sequence((Ref("b"), Ref("c"))))), "a | (b c)"),
    ],
)
def test_rules_render_as_gbnf(node: Node, gbnf: str) -> None:
    assert Grammar(rules={"root": node}).gbnf == f"root ::= {gbnf}\n"


def test_a_schema_alone_gives_a_json_grammar() -> None:
    grammar = schema_rules({"type": "array", "items": {"enum": ["<a&b>"]}, "maxItems": 1})
    assert sample(grammar, random.Random(3)) in ("[]", '["\\u003ca\\u0026b\\u003e"]')


def test_the_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="1 or more"):
        domain_grammar(SchemaDomain(None), max_elements=0)


# ---------------------------------------------------------------------------------------------- deep schemas


def nested(depth: int) -> tuple[dict[str, Any], int]:
    """An object whose property ``inner`` is an object ... ``depth`` objects deep, a string at the bottom; and how
    many schemas down that string is."""
    schema: dict[str, Any] = {"type": "string", "maxLength": 3}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"inner": schema}, "required": ["inner"]}
    return schema, depth


def chained(depth: int) -> tuple[dict[str, Any], int]:
    """The same shape through ``depth`` definitions, each referring to the next (as a generated schema does):
    a reference and its definition are two levels."""
    definitions: dict[str, Any] = {
        f"level{n}": {"type": "object", "properties": {"inner": {"$ref": f"#/$defs/level{n + 1}"}}}
        for n in range(depth)
    }
    definitions[f"level{depth}"] = {"type": "string", "maxLength": 3}
    return {"$ref": "#/$defs/level0", "$defs": definitions}, 2 * depth + 1


def open_arrays(depth: int) -> tuple[dict[str, Any], int]:
    """Arrays of arrays ``depth`` deep with no bound on their items: inlined, each level doubled the grammar."""
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema, depth


def arrays(depth: int) -> tuple[dict[str, Any], int]:
    """Arrays of arrays ``depth`` deep, each item the one branch of an ``anyOf`` (two levels)."""
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": {"anyOf": [schema]}, "maxItems": 1}
    return schema, 2 * depth


@pytest.mark.parametrize("depth", [1, MAX_SCHEMA_DEPTH // 2 - 1, MAX_SCHEMA_DEPTH, 170, 300, 2000])
@pytest.mark.parametrize("shape", [nested, chained, arrays, open_arrays])
def test_a_schema_within_the_depth_gives_a_grammar_and_a_deeper_one_is_refused(shape: Any, depth: int) -> None:
    """Within ``MAX_SCHEMA_DEPTH`` levels the replies the grammar admits are DIAL with valid payloads, and the
    grammar grows with the schema, not with its nesting; past it the schema is refused in one line."""
    schema, bottom = shape(depth)
    if bottom >= MAX_SCHEMA_DEPTH:
        started = time.perf_counter()
        with pytest.raises(ValueError, match=f"nests deeper than {MAX_SCHEMA_DEPTH} schemas") as refused:
            domain_grammar(SchemaDomain(schema), max_text=8, max_string=6)
        assert "\n" not in str(refused.value) and "'do-it'" in str(refused.value)
        assert time.perf_counter() - started < 5
        return
    grammar = domain_grammar(SchemaDomain(schema), max_text=8, max_string=6)
    assert grammar.gbnf.startswith("root ::= ")
    assert len(grammar.gbnf) < 4_000 + 400 * bottom, len(grammar.gbnf)
    rng = random.Random(depth)
    for _ in range(3):
        check_reply(sample(grammar, rng), {"do-it": schema, "look": None})


def test_a_grammar_past_its_rule_bound_is_refused_at_once() -> None:
    """A schema of many optional properties, each an object of its own: over ``MAX_GRAMMAR_RULES`` rules."""
    members = {
        f"p{n}": {"type": "object", "properties": {"a": {"type": "string"}}} for n in range(MAX_GRAMMAR_RULES)
    }
    started = time.perf_counter()
    with pytest.raises(ValueError, match=f"more than {MAX_GRAMMAR_RULES} rules"):
        domain_grammar(SchemaDomain({"type": "object", "properties": members}))
    assert time.perf_counter() - started < 10
