"""Grammars that constrain a local model's replies to valid DIAL for one domain, in llama.cpp's GBNF.

:func:`domain_grammar` writes a grammar whose every sentence is one ``<dial>`` envelope that validates against the
lenient XSD, holding one to ``max_elements`` speech acts: informs, asks (plain, typed, or a choice with options),
suggestions of the domain's actions, each with a ``<dial-payload>`` whose JSON is valid against the action's
payload schema, and the ``session-complete`` phatic. The speech acts come from the language's registry
(:func:`speech_acts`); the action names and schemas from the domain's vocabulary
(:func:`~dial_runtime.agents.prompt.vocabulary`: ``domain.vocabulary[name]["schema"]`` or the spec's
``payload_schema``).

JSON Schema is translated for the subset payload schemas use: ``type`` (one or a list), ``object`` with
``properties`` and ``required`` (only the listed properties are written, required ones first, in schema order),
``string`` with ``minLength``/``maxLength``, ``enum`` and ``const`` of any JSON, ``integer``, ``number``,
``boolean``, ``null``, ``array`` with ``items``/``minItems``/``maxItems``, ``anyOf``/``oneOf`` (``oneOf``
branches are not made exclusive), ``nullable: true`` and local ``$ref`` into ``$defs``/``definitions``. Anything
else (``pattern``, ``format``, numeric bounds, ``allOf``, ``not``, ...) makes that part of the schema accept any
JSON value of its type, or any JSON value at all. :attr:`Grammar.approximations` lists each such place, and the
domain's own validation still refuses what does not fit. Text is bounded (``max_text`` characters per element)
so a small model cannot ramble forever inside one.

The grammar is built as a small tree of rules (:class:`Literal`, :class:`Chars`, :class:`Sequence`,
:class:`Choice`, :class:`Repeat`, :class:`Ref`) rendered to GBNF by :meth:`Grammar.gbnf`; the tests walk the same
tree to draw random sentences and check each one. Every sub-schema (a property's, an array's items, a branch, a
definition) is a rule of its own, named once and referred to wherever it is used, and so are the optional
members of an object, so the grammar grows with the schema's size, never with its nesting (an array's items
written inline, at every level, would double the grammar with each level). A schema nested deeper than
:data:`MAX_SCHEMA_DEPTH` schemas (through properties, items, branches and references alike), or a grammar
that would be over :data:`MAX_GRAMMAR_RULES` rules, is refused with a ``ValueError`` that says where.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs
import msgspec

from ..language import schema as language_schema
from ..language.outcomes import escape_attribute

__all__ = [
    "MAX_GRAMMAR_RULES",
    "MAX_SCHEMA_DEPTH",
    "Chars",
    "Choice",
    "Grammar",
    "Literal",
    "Node",
    "Ref",
    "Repeat",
    "Sequence",
    "domain_grammar",
    "schema_rules",
    "speech_acts",
]


@attrs.frozen
class Literal:
    """Exactly ``text``."""

    text: str


@attrs.frozen
class Chars:
    """One character: any of ``ranges`` (inclusive code-point pairs), or with ``negated`` any other character."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@attrs.frozen
class Sequence:
    """Each of ``items`` in order."""

    items: tuple[Node, ...]


@attrs.frozen
class Choice:
    """One of ``options``; the first is the simplest, which a bounded walk of the tree falls back to."""

    options: tuple[Node, ...]


@attrs.frozen
class Repeat:
    """``item`` from ``least`` to ``most`` times (``None``: without bound)."""

    item: Node
    least: int = 0
    most: int | None = None


@attrs.frozen
class Ref:
    """The rule named ``name``."""

    name: str


Node = Literal | Chars | Sequence | Choice | Repeat | Ref


class Grammar(msgspec.Struct, frozen=True, kw_only=True):
    """Named rules, starting at ``root``, and the places where a schema was only approximated."""

    rules: Mapping[str, Node]
    approximations: tuple[str, ...] = ()

    @property
    def gbnf(self) -> str:
        """The grammar in llama.cpp's GBNF, one rule per line, ``root`` first."""
        names = ["root", *sorted(name for name in self.rules if name != "root")]
        return "".join(f"{name} ::= {_render(self.rules[name], top=True)}\n" for name in names)


# ---------------------------------------------------------------------------------------------- the registry


def speech_acts() -> frozenset[str]:
    """The speech acts of DIAL, from the language's one registry (the lenient XSD today)."""
    return language_schema.speech_acts()


# ---------------------------------------------------------------------------------------------- GBNF


def _render(node: Node, *, top: bool = False) -> str:
    if isinstance(node, Literal):
        return '"' + "".join(_string_char(character) for character in node.text) + '"'
    if isinstance(node, Chars):
        inside = "".join(
            _class_char(low) + (f"-{_class_char(high)}" if high != low else "") for low, high in node.ranges
        )
        return f"[{'^' if node.negated else ''}{inside}]"
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, Sequence):
        text = " ".join(_render(item) for item in node.items) if node.items else '""'
        return text if top or len(node.items) <= 1 else f"({text})"
    if isinstance(node, Choice):
        text = " | ".join(_render(option) for option in node.options)
        return text if top else f"({text})"
    atomic = isinstance(node.item, (Literal, Chars, Ref))
    inner = _render(node.item) if atomic else f"({_render(node.item, top=True)})"
    if (node.least, node.most) == (0, 1):
        return f"{inner}?"
    if (node.least, node.most) == (0, None):
        return f"{inner}*"
    if (node.least, node.most) == (1, None):
        return f"{inner}+"
    most = "" if node.most is None else str(node.most)
    return f"{inner}{{{node.least},{most}}}" if node.most != node.least else f"{inner}{{{node.least}}}"


_STRING_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string_char(character: str) -> str:
    if character in _STRING_ESCAPES:
        return _STRING_ESCAPES[character]
    code = ord(character)
    return f"\\x{code:02X}" if code < 0x20 or code == 0x7F else character


def _class_char(code: int) -> str:
    character = chr(code)
    if character in "]\\^-[":
        return "\\" + character
    if 0x20 <= code < 0x7F:
        return character
    return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


# ---------------------------------------------------------------------------------------------- text


def _seq(*items: Node) -> Sequence:
    return Sequence(tuple(items))


def _any_of(*options: Node) -> Node:
    return options[0] if len(options) == 1 else Choice(tuple(options))


#: XML character data: anything but markup, '>' (so ']]>' cannot occur) and what XML 1.0 refuses.
_XML_TEXT_CHAR = Chars(
    ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x3C, 0x3C), (0x3E, 0x3E), (0x26, 0x26), (0xFFFE, 0xFFFF)),
    negated=True,
)
_ENTITY = Choice(tuple(Literal(entity) for entity in ("&amp;", "&lt;", "&gt;", "&quot;", "&apos;")))
#: An attribute value's character (double-quoted).
_ATTRIBUTE_CHAR = Chars(((0x00, 0x1F), (0x22, 0x22), (0x26, 0x26), (0x3C, 0x3C), (0xFFFE, 0xFFFF)), negated=True)
#: A character that starts visible text: XML text but no whitespace (what Python's ``str.isspace`` says).
_VISIBLE_CHAR = Chars(
    (
        (0x00, 0x20),
        (0x26, 0x26),
        (0x3C, 0x3C),
        (0x3E, 0x3E),
        (0x85, 0x85),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFFFE, 0xFFFF),
    ),
    negated=True,
)
_BREAK = Repeat(Chars(((0x20, 0x20), (0x0A, 0x0A))), 0, 2)

# JSON text inside XML: a string's character is anything but '"', '\\', control characters and XML markup,
# which are written as JSON escapes (or XML entities, which the XML parser turns back).
_JSON_CHAR = Chars(
    ((0x00, 0x1F), (0x22, 0x22), (0x26, 0x26), (0x3C, 0x3C), (0x3E, 0x3E), (0x5C, 0x5C), (0xFFFE, 0xFFFF)),
    negated=True,
)
_HEX = Chars(((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)))
_JSON_ESCAPE = _seq(
    Literal("\\"),
    Choice(
        (
            Chars(
                (
                    (0x22, 0x22),
                    (0x5C, 0x5C),
                    (0x2F, 0x2F),
                    (0x62, 0x62),
                    (0x66, 0x66),
                    (0x6E, 0x6E),
                    (0x72, 0x72),
                    (0x74, 0x74),
                )
            ),
            _seq(Literal("u00"), Chars(((0x30, 0x37),)), _HEX),
        )
    ),
)
#: The XML entities a JSON string may hold (``&quot;`` would end the string).
_JSON_ENTITY = Choice(tuple(Literal(entity) for entity in ("&amp;", "&lt;", "&gt;", "&apos;")))
_JSON_WS = Repeat(Literal(" "), 0, 1)


# ---------------------------------------------------------------------------------------------- JSON Schema

#: How deep schemas may nest inside one another (an object's property, an array's items, an ``anyOf`` branch, a
#: ``$ref``'s definition: each one level): a deeper schema is refused (``ValueError``).
MAX_SCHEMA_DEPTH = 32

#: The most rules one grammar may have (each sub-schema is one, an object's optional member one more): a domain
#: whose schemas would need more is refused (``ValueError``), which bounds the grammar's size and the time to
#: build it. A payload schema of a few hundred properties is well within it.
MAX_GRAMMAR_RULES = 20_000


class _SchemaRules:
    """Translates JSON Schemas into rules of one grammar, sharing the rules for common JSON pieces."""

    def __init__(self, rules: dict[str, Node], max_text: int) -> None:
        self.rules = rules
        self.max_text = max_text
        self.approximations: list[str] = []
        # Definition rules by the reference and the definitions it is read from: schemas share a rule only when
        # their definitions are the same.
        self._defs: dict[tuple[str, str], str] = {}
        self._count = 1
        self._shared()

    def _shared(self) -> None:
        rules = self.rules
        rules.setdefault("json-char", Choice((_JSON_CHAR, _JSON_ESCAPE, _JSON_ENTITY)))
        rules.setdefault(
            "json-string", _seq(Literal('"'), Repeat(Ref("json-char"), 0, self.max_text), Literal('"'))
        )
        digits = Repeat(Chars(((0x30, 0x39),)), 0, 15)
        rules.setdefault(
            "json-integer",
            _seq(Repeat(Literal("-"), 0, 1), Choice((Literal("0"), _seq(Chars(((0x31, 0x39),)), digits)))),
        )
        fraction = Repeat(_seq(Literal("."), Repeat(Chars(((0x30, 0x39),)), 1, 15)), 0, 1)
        exponent = Repeat(
            _seq(
                Chars(((0x45, 0x45), (0x65, 0x65))),
                Repeat(Chars(((0x2B, 0x2B), (0x2D, 0x2D))), 0, 1),
                Repeat(Chars(((0x30, 0x39),)), 1, 3),
            ),
            0,
            1,
        )
        rules.setdefault("json-number", _seq(Ref("json-integer"), fraction, exponent))
        rules.setdefault("json-boolean", Choice((Literal("true"), Literal("false"))))
        rules.setdefault("json-null", Literal("null"))
        member = _seq(Ref("json-string"), Literal(":"), _JSON_WS, Ref("json-value"))
        rules.setdefault(
            "json-object",
            _seq(
                Literal("{"),
                Repeat(_seq(member, Repeat(_seq(Literal(","), _JSON_WS, member), 0, 15)), 0, 1),
                Literal("}"),
            ),
        )
        rules.setdefault(
            "json-array",
            _seq(
                Literal("["),
                Repeat(
                    _seq(Ref("json-value"), Repeat(_seq(Literal(","), _JSON_WS, Ref("json-value")), 0, 15)), 0, 1
                ),
                Literal("]"),
            ),
        )
        rules.setdefault(
            "json-value",
            Choice(
                tuple(Ref(f"json-{kind}") for kind in ("string", "number", "boolean", "null", "object", "array"))
            ),
        )

    def _loose(self, where: str, why: str, fallback: Node) -> Node:
        self.approximations.append(f"{where}: {why}")
        return fallback

    def _named(self, node: Node) -> Node:
        """``node`` as a rule of its own, referred to by name (a reference or a literal as it is)."""
        if isinstance(node, (Ref, Literal, Chars)):
            return node
        if len(self.rules) >= MAX_GRAMMAR_RULES:
            raise ValueError(
                f"the grammar would need more than {MAX_GRAMMAR_RULES} rules: its schemas are too large"
            )
        name = f"s-{self._count}"
        self._count += 1
        self.rules[name] = node
        return Ref(name)

    def node(self, schema: Any, where: str, root: Mapping[str, Any], depth: int = 0) -> Node:
        """The rule for values valid against ``schema`` (found at ``where``, ``depth`` schemas down; ``root``
        holds its ``$defs``): below the top, a rule of its own, referred to by name."""
        built = self._build(schema, where, root, depth)
        return built if depth == 0 else self._named(built)

    def _build(self, schema: Any, where: str, root: Mapping[str, Any], depth: int) -> Node:
        if schema is True or schema == {}:
            return Ref("json-value")
        if not isinstance(schema, Mapping):
            return self._loose(where, "not a schema object", Ref("json-value"))
        if depth >= MAX_SCHEMA_DEPTH:
            raise ValueError(f"the schema at {where[:200]} nests deeper than {MAX_SCHEMA_DEPTH} schemas")
        if "$ref" in schema:
            return self._reference(schema["$ref"], where, root, depth)
        if "const" in schema:
            return Literal(_compact(schema["const"]))
        if "enum" in schema:
            values = schema["enum"]
            if isinstance(values, list) and values:
                return _any_of(*(Literal(_compact(value)) for value in values))
            return self._loose(where, "an empty or malformed enum", Ref("json-value"))
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                branches = schema[keyword]
                if not isinstance(branches, list) or not branches:
                    return self._loose(where, f"a malformed {keyword}", Ref("json-value"))
                options = [
                    self.node(branch, f"{where}/{keyword}/{index}", root, depth + 1)
                    for index, branch in enumerate(branches)
                ]
                return self._nullable(schema, _any_of(*options))
        unsupported = sorted(set(schema) & _UNSUPPORTED)
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds) if isinstance(kinds, list) else None
        if kinds is None:
            kinds = ["object"] if "properties" in schema else ["array"] if "items" in schema else None
        if kinds is None:
            return self._loose(where, "no type", Ref("json-value"))
        options = [self._typed(kind, schema, where, root, depth) for kind in kinds]
        if unsupported:
            self.approximations.append(f"{where}: {', '.join(unsupported)} not enforced")
        return self._nullable(schema, _any_of(*options))

    def _nullable(self, schema: Mapping[str, Any], node: Node) -> Node:
        return Choice((node, Ref("json-null"))) if schema.get("nullable") is True else node

    def _reference(self, reference: Any, where: str, root: Mapping[str, Any], depth: int) -> Node:
        if not isinstance(reference, str) or not reference.startswith(("#/$defs/", "#/definitions/")):
            return self._loose(where, f"$ref {reference!r} is not a local definition", Ref("json-value"))
        section, _, name = reference[2:].partition("/")
        definitions = root.get(section) or {}
        target = definitions.get(name) if isinstance(definitions, Mapping) else None
        if target is None:
            return self._loose(where, f"$ref {reference!r} names no definition", Ref("json-value"))
        key = (reference, json.dumps(definitions, sort_keys=True, default=str))
        if key not in self._defs:
            rule = self._defs[key] = f"def-{len(self._defs) + 1}"
            self.rules[rule] = self.node(target, reference, root, depth + 1)
        return Ref(self._defs[key])

    def _typed(
        self, kind: Any, schema: Mapping[str, Any], where: str, root: Mapping[str, Any], depth: int
    ) -> Node:
        if kind == "string":
            return self._string(schema, where)
        if kind in ("integer", "number", "boolean", "null"):
            bounds = sorted(set(schema) & _NUMERIC_BOUNDS)
            if bounds and kind in ("integer", "number"):
                self.approximations.append(f"{where}: {', '.join(bounds)} not enforced")
            return Ref(f"json-{kind}")
        if kind == "array":
            return self._array(schema, where, root, depth)
        if kind == "object":
            return self._object(schema, where, root, depth)
        return self._loose(where, f"unknown type {kind!r}", Ref("json-value"))

    def _string(self, schema: Mapping[str, Any], where: str) -> Node:
        least = schema.get("minLength", 0)
        most = schema.get("maxLength")
        least = least if isinstance(least, int) and least >= 0 else 0
        most = most if isinstance(most, int) and most >= least else None
        if most is None:
            most = max(least, self.max_text)
        if (least, most) == (0, self.max_text):
            return Ref("json-string")
        return _seq(Literal('"'), Repeat(Ref("json-char"), least, most), Literal('"'))

    def _array(self, schema: Mapping[str, Any], where: str, root: Mapping[str, Any], depth: int) -> Node:
        items = schema.get("items", True)
        item = self.node(items, f"{where}/items", root, depth + 1)
        least = schema.get("minItems", 0)
        most = schema.get("maxItems")
        least = least if isinstance(least, int) and least >= 0 else 0
        most = most if isinstance(most, int) and most >= least else None
        rest = Repeat(_seq(Literal(","), _JSON_WS, item), max(least - 1, 0), None if most is None else most - 1)
        listed = _seq(item, rest)
        body = listed if least >= 1 else Repeat(listed, 0, 1) if most != 0 else _seq()
        return _seq(Literal("["), body, Literal("]"))

    def _object(self, schema: Mapping[str, Any], where: str, root: Mapping[str, Any], depth: int) -> Node:
        properties = schema.get("properties") or {}
        if not isinstance(properties, Mapping):
            return self._loose(where, "malformed properties", Ref("json-object"))
        if not properties:
            extra = schema.get("additionalProperties", True)
            return Literal("{}") if extra is False else Ref("json-object")
        required = [name for name in schema.get("required") or () if name in properties]
        missing = [name for name in schema.get("required") or () if name not in properties]
        if missing:
            self.approximations.append(f"{where}: required {', '.join(map(str, missing))} has no property schema")
        optional = [name for name in properties if name not in required]
        members = {
            name: _seq(
                Literal(_compact(name) + ":"),
                _JSON_WS,
                self.node(properties[name], f"{where}/properties/{name}", root, depth + 1),
            )
            for name in [*required, *optional]
        }
        comma = _seq(Literal(","), _JSON_WS)
        items: list[Node] = [Literal("{")]
        for index, name in enumerate(required):
            items += [comma, members[name]] if index else [members[name]]
        # The optional members in schema order, each maybe: ``rest[i]`` is those from the i-th on, each with its
        # comma, a rule of its own so that every member is written once.
        rest: list[Node] = [_seq()]
        for name in reversed(optional):
            rest.append(self._named(_seq(Repeat(_seq(comma, members[name]), 0, 1), rest[-1])))
        rest.reverse()
        if required:
            items.append(rest[0])
        else:
            # No required property: whichever optional one comes first has no comma before it.
            firsts = [self._named(_seq(members[name], rest[i + 1])) for i, name in enumerate(optional)]
            items.append(Repeat(_any_of(*firsts), 0, 1))
        items.append(Literal("}"))
        return Sequence(tuple(items))


_UNSAFE_IN_XML = re.compile("[&<>\ud800-\udfff\ufffe\uffff]")
_NUMERIC_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_UNSUPPORTED = frozenset(
    {
        "pattern",
        "format",
        "allOf",
        "not",
        "if",
        "patternProperties",
        "propertyNames",
        "uniqueItems",
        "contains",
        "dependentRequired",
        "dependentSchemas",
        "minProperties",
        "maxProperties",
        "prefixItems",
    }
)


def _compact(value: Any) -> str:
    """``value`` as compact JSON that is also XML text: markup characters, surrogates and the two non-characters
    XML refuses as JSON escapes."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _UNSAFE_IN_XML.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def schema_rules(schema: Any, *, max_text: int = 200) -> Grammar:
    """A grammar whose sentences are JSON values valid against ``schema`` (see the module docstring)."""
    rules: dict[str, Node] = {}
    translator = _SchemaRules(rules, max_text)
    root = schema if isinstance(schema, Mapping) else {}
    rules["root"] = translator.node(schema, "#", root)
    return Grammar(rules=rules, approximations=tuple(translator.approximations))


# ---------------------------------------------------------------------------------------------- DIAL


def _text(max_text: int) -> Node:
    """Element text that shows something: a visible character first, then up to ``max_text`` more."""
    return _seq(Choice((_VISIBLE_CHAR, _ENTITY)), Repeat(Ref("text-char"), 0, max_text - 1))


def _acts(rules: dict[str, Node], actions: list[tuple[str, Node]], max_text: int, max_options: int) -> list[Node]:
    """The rules of each speech act the grammar writes, for the acts the registry has."""
    known = speech_acts()
    written: list[Node] = []
    if "dial-inform" in known:
        rules["inform"] = _seq(Literal("<dial-inform>"), Ref("text"), Literal("</dial-inform>"))
        written.append(Ref("inform"))
    if "dial-suggest" in known and actions:
        options: list[Node] = []
        for index, (name, payload) in enumerate(actions, start=1):
            rules[f"payload-{index}"] = payload
            options.append(
                _seq(
                    Literal(f'<dial-suggest action="{escape_attribute(name)}">'),
                    Ref("text"),
                    Literal("<dial-payload>"),
                    Ref(f"payload-{index}"),
                    Literal("</dial-payload></dial-suggest>"),
                )
            )
        rules["suggest"] = _any_of(*options)
        written.append(Ref("suggest"))
    if "dial-ask" in known:
        typed = [
            value for value in language_schema.known_values("response-type") if value not in ("choice", "file")
        ]
        option = _seq(
            Literal('<dial-option value="'),
            Repeat(_ATTRIBUTE_CHAR, 1, 40),
            Literal('">'),
            Ref("text"),
            Literal("</dial-option>"),
        )
        rules["ask"] = Choice(
            (
                _seq(Literal("<dial-ask>"), Ref("text"), Literal("</dial-ask>")),
                _seq(
                    Literal('<dial-ask response-type="'),
                    _any_of(*(Literal(value) for value in typed)),
                    Literal('">'),
                    Ref("text"),
                    Literal("</dial-ask>"),
                ),
                _seq(
                    Literal('<dial-ask response-type="choice">'),
                    Ref("text"),
                    Repeat(option, 1, max_options),
                    Literal("</dial-ask>"),
                ),
            )
        )
        written.append(Ref("ask"))
    if "dial-phatic" in known:
        rules["phatic"] = Literal('<dial-phatic signal="session-complete"/>')
        written.append(Ref("phatic"))
    return written


def domain_grammar(
    domain: Any, *, max_elements: int = 6, max_text: int = 240, max_options: int = 6, max_string: int = 200
) -> Grammar:
    """The grammar of one valid DIAL reply for ``domain`` (see the module docstring).

    ``max_elements`` bounds the speech acts of one reply, ``max_text`` the characters of an element's text,
    ``max_options`` a choice's options and ``max_string`` a payload string without a ``maxLength`` of its own.
    """
    from ..agents.prompt import vocabulary  # prompt imports the runtime's records; keep this module's import light

    if max_elements < 1 or max_text < 1 or max_options < 1 or max_string < 1:
        raise ValueError("domain_grammar: the bounds must be 1 or more")
    rules: dict[str, Node] = {}
    translator = _SchemaRules(rules, max_string)
    rules["text-char"] = Choice((_XML_TEXT_CHAR, _ENTITY))
    rules["text"] = _text(max_text)
    actions: list[tuple[str, Node]] = []
    for entry in vocabulary(domain):
        if entry.schema is None:
            actions.append((entry.name, Ref("json-value")))
            continue
        root = entry.schema if isinstance(entry.schema, Mapping) else {}
        try:
            actions.append((entry.name, translator.node(entry.schema, f"{entry.name}#", root)))
        except ValueError as refused:
            raise ValueError(f"domain_grammar: action {entry.name!r}'s payload schema: {refused}") from None
    acts = _acts(rules, actions, max_text, max_options)
    rules["element"] = _any_of(*acts)
    rules["root"] = _seq(
        Literal("<dial>"), _BREAK, Repeat(_seq(Ref("element"), _BREAK), 1, max_elements), Literal("</dial>")
    )
    return Grammar(rules=rules, approximations=tuple(translator.approximations))
