"""Validate DIAL envelopes against the XML Schemas in ``dial_runtime/dial_xsd/``.

Two schemas ship with the package (XSD 1.0, no namespace):

- ``dial-lenient.xsd``: what the runtime accepts from agents and what it emits itself (a bare ``<dial>`` with no
  attributes, a declare whose body is bare JSON text, a suggest with text, unknown extension attributes);
- ``dial-strict.xsd``: the spec (``version="0.1"`` and ``actor`` on the root, closed enumerations, the required
  attributes, a declare that holds a ``dial-payload``).

The fast path is lxml (libxml2 in C): :func:`lxml_schema` compiles each schema once per process and
:func:`validate` parses with a hardened parser (no entity expansion, no DTD loading, no network, libxml2's size
limits on). Only when lxml rejects a document are readable messages computed: :func:`describe_lxml_error`
translates libxml2's log entries into sentences that name the element and the attribute or child at fault, e.g.
``dial-ask: attribute 'response-type' must be one of text, choice, confirm, number, file; got 'maybe'``.
libxml2 stops checking an element's remaining children after the first unexpected child, so :func:`validate`
takes such a child out and checks again, until every problem has been seen.

xmlschema reads the lenient schema for what code needs to know about the language: :func:`speech_acts` (the
elements a ``<dial>`` holds) and :func:`known_values` (the listed values of render, response-type, signal, env and
actor).

An ``etree.XMLSchema`` keeps the error log of its last run, so do not validate with the same schema object from
several threads at once and read ``error_log`` right after ``validate``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.resources
import json
import pathlib
import re
from collections.abc import Iterable
from typing import Any, cast

import msgspec
from lxml import etree

from dial_runtime.language.acts import ACT_NAMES, SPEECH_ACTS
from dial_runtime.language.hardening import SAFE_OPTIONS
from dial_runtime.language.records import is_json_type

__all__ = [
    "SchemaIssue",
    "describe_lxml_error",
    "hardened_parser",
    "known_values",
    "lxml_schema",
    "speech_acts",
    "validate",
    "xsd_path",
]

_XSD_PACKAGE = "dial_runtime.dial_xsd"
_XSD_FILES = {False: "dial-lenient.xsd", True: "dial-strict.xsd"}

# The re-validation loop of validate() takes out at most this many unexpected elements.
_MAX_ROUNDS = 64


class SchemaIssue(msgspec.Struct, frozen=True, kw_only=True):
    """One reason a document is not valid DIAL.

    ``line`` is 1-based in the validated text (``None`` when libxml2 gives none); ``path`` is the XPath of the
    element at fault (``/dial/dial-ask[2]``), ``None`` for syntax errors; ``message`` names the element and the
    attribute or child at fault.
    """

    line: int | None
    path: str | None
    message: str

    def __str__(self) -> str:
        return self.message if self.line is None else f"line {self.line}: {self.message}"


# ---------------------------------------------------------------------------------------------- schemas


_resources = contextlib.ExitStack()
atexit.register(_resources.close)


def xsd_path(strict: bool = False) -> pathlib.Path:
    """The file of the lenient (default) or strict XSD; works from an installed package too."""
    return _xsd_path(bool(strict))


@functools.cache
def _xsd_path(strict: bool) -> pathlib.Path:
    resource = importlib.resources.files(_XSD_PACKAGE).joinpath(_XSD_FILES[strict])
    # A real file for a package on disk; a temporary copy, kept until exit, for a zipped package.
    return _resources.enter_context(importlib.resources.as_file(resource))


def hardened_parser() -> etree.XMLParser:
    """A new lxml parser with :data:`~dial_runtime.language.hardening.SAFE_OPTIONS`: it expands no entity, loads
    no DTD, uses no network and keeps libxml2's size limits.

    Text is read as UTF-8 whatever an XML declaration says, since :func:`validate` encodes its ``str`` so.
    Parsers are not thread-safe: take a new one per parse (it is cheap).
    """
    return etree.XMLParser(**SAFE_OPTIONS, encoding="utf-8")


def lxml_schema(strict: bool = False) -> etree.XMLSchema:
    """The lenient (default) or strict schema compiled by lxml, once per process."""
    return _lxml_schema(bool(strict))


@functools.cache
def _lxml_schema(strict: bool) -> etree.XMLSchema:
    parser = etree.XMLParser(**SAFE_OPTIONS)
    return etree.XMLSchema(etree.parse(str(xsd_path(strict)), parser))


@functools.cache
def _xmlschema(strict: bool) -> Any:
    """The schema as xmlschema reads it. Imported here: xmlschema is needed only to describe a rejected document
    and to list the language's elements, and loading it adds ~30,000 objects that every full garbage collection
    of a long-running process would walk again."""
    import xmlschema

    return xmlschema.XMLSchema10(str(xsd_path(strict)))


@functools.cache
def speech_acts() -> frozenset[str]:
    """The speech-act elements of DIAL: the global elements the lenient XSD's ``<dial>`` root may hold."""
    schema = _xmlschema(False)
    root = schema.elements["dial"]
    acts = {particle.name for particle in root.type.content.iter_elements()}
    # Only global declarations count: a local element inside the root would not be a speech act.
    return frozenset(name for name in acts if name in schema.elements and name != "dial")


@functools.cache
def known_values(type_name: str) -> tuple[str, ...]:
    """The values the lenient XSD lists for a named simple type, in schema order.

    ``render``, ``response-type``, ``signal``, ``env`` and ``actor`` are unions of a listed enumeration with any
    other token; this returns the listed values. ``()`` for a type with no enumeration or no such type.
    """
    xsd_type = _xmlschema(False).types.get(type_name)
    if xsd_type is None:
        return ()
    candidates = [xsd_type, *getattr(xsd_type, "member_types", ())]
    for candidate in candidates:
        enumeration = getattr(candidate, "enumeration", None)
        if enumeration:
            return tuple(str(value) for value in enumeration)
    return ()


# ---------------------------------------------------------------------------------------------- validation


def validate(text: str, *, strict: bool = False) -> list[SchemaIssue]:
    """Check a whole document whose root is ``<dial>`` against the lenient (default) or strict XSD.

    Returns an empty list when the document is valid. Text that is not well-formed XML gives one issue per syntax
    error. Prose around the envelope is a syntax error too: this validates a document, it does not look for an
    envelope inside prose (the parser does that).
    """
    parser = hardened_parser()
    try:
        root = etree.fromstring(text.encode("utf-8", "surrogatepass"), parser)
    except etree.XMLSyntaxError as error:
        return _syntax_issues(parser, error)
    tree = root.getroottree()
    if getattr(tree.docinfo, "doctype", ""):
        # Its entities stay unexpanded (and libxml2's schema validator fails on entity nodes): say so and stop.
        message = "the document has a DOCTYPE declaration; DIAL takes none and its entities are not expanded"
        return [SchemaIssue(line=1, path=None, message=message)]
    if root.tag != "dial":
        return [_wrong_root(root)]
    schema = lxml_schema(strict)
    try:
        valid = schema.validate(tree)
    except etree.XMLSchemaValidateError as error:  # libxml2's "internal error"; not seen without a DOCTYPE
        return [SchemaIssue(line=None, path=None, message=f"the schema validator failed: {error}")]
    return [*([] if valid else _schema_issues(schema, tree)), *_payload_issues(tree)]


def _payload_issues(tree: etree._ElementTree) -> list[SchemaIssue]:
    """A ``dial-payload`` whose type says JSON (none, ``application/json``, ``*/*+json``) but whose text is not
    JSON: the schema cannot say so, and the runtime refuses such a proposal."""
    issues = []
    for payload in tree.iter("dial-payload"):
        kind = payload.get("type")
        if len(payload) or not is_json_type(kind):
            continue
        try:
            json.loads((payload.text or "").strip())
        except (ValueError, RecursionError) as error:
            said = f"its type is {kind}" if kind else "it has no type, so it is JSON"
            message = f"dial-payload: not valid JSON, though {said} ({' '.join(str(error).split())})"
            issues.append(SchemaIssue(line=_line(payload.sourceline), path=tree.getpath(payload), message=message))
    return issues


def _wrong_root(root: etree._Element) -> SchemaIssue:
    tag = root.tag if isinstance(root.tag, str) else "?"
    match = re.fullmatch(r"\{(.*)\}(.*)", tag)
    if match:
        message = (
            f"{match.group(2)}: DIAL elements have no XML namespace; the root is in namespace '{match.group(1)}'"
        )
    else:
        message = f"{tag}: the root element of a DIAL document must be 'dial'"
    return SchemaIssue(line=_line(root.sourceline), path=f"/{tag}", message=message)


def _syntax_issues(parser: etree.XMLParser, error: etree.XMLSyntaxError) -> list[SchemaIssue]:
    issues: list[SchemaIssue] = []
    seen: set[tuple[int, int, str]] = set()
    for entry in _entries(parser.error_log):
        if entry.level < etree.ErrorLevels.ERROR:
            continue
        key = (entry.line, entry.column, entry.message)
        if key in seen:
            continue
        seen.add(key)
        issues.append(
            SchemaIssue(
                line=_line(entry.line),
                path=None,
                message=f"not well-formed XML (column {entry.column}): {_describe_syntax(entry.message)}",
            )
        )
    if not issues:  # lxml raised without logging (it does not happen with libxml2 2.9 to 2.14, but be safe)
        line = error.lineno if isinstance(error.lineno, int) else None
        issues.append(SchemaIssue(line=line, path=None, message=f"not well-formed XML: {error.msg}"))
    return issues


_SYNTAX_HINTS = [
    (
        re.compile(r"xmlParseEntityRef: no name"),
        "a raw '&' in text or in an attribute value; write it as &amp;",
    ),
    (
        re.compile(r"StartTag: invalid element name"),
        "a raw '<' that does not start a tag; write it as &lt;",
    ),
    (
        re.compile(r"Document is empty"),
        "the text holds no XML element; a DIAL document is one <dial> envelope",
    ),
    (
        re.compile(r"Start tag expected, '<' not found"),
        "the text does not start with an element; a DIAL document is one <dial> envelope with no prose around it",
    ),
    (
        re.compile(r"Extra content at the end of the document"),
        "content after the end of the root element; a DIAL document is one <dial> envelope with nothing after it",
    ),
]


def _describe_syntax(message: str) -> str:
    message = message.strip()
    for pattern, hint in _SYNTAX_HINTS:
        if pattern.search(message):
            return f"{hint} ({message})"
    return message


def _schema_issues(schema: etree.XMLSchema, tree: etree._ElementTree) -> list[SchemaIssue]:
    """Translate the error log of a failed run, taking out unexpected elements and re-running to see the rest.

    The tree belongs to :func:`validate`, which parsed it, so taking elements out of it is harmless. Paths are
    reported as they were in the document before anything was taken out.
    """
    root = tree.getroot()
    original_paths = {element: tree.getpath(element) for element in root.iter()}
    issues: list[SchemaIssue] = []
    seen: set[tuple[str | None, str]] = set()
    for _ in range(_MAX_ROUNDS):
        unexpected: list[etree._Element] = []
        for entry in _entries(schema.error_log):
            element = _element_at(tree, entry.path)
            path = original_paths.get(element, entry.path) if element is not None else entry.path
            message = describe_lxml_error(entry, root=root)
            if (path, message) not in seen:
                seen.add((path, message))
                line = _line(entry.line) or (_line(element.sourceline) if element is not None else None)
                issues.append(SchemaIssue(line=line, path=path, message=message))
            if (
                entry.type == etree.ErrorTypes.SCHEMAV_ELEMENT_CONTENT
                and "This element is not expected" in entry.message
                and element is not None
                and element.getparent() is not None
            ):
                unexpected.append(element)
        if not unexpected:
            break
        for element in unexpected:
            _take_out(element)
        try:
            if schema.validate(tree):
                break
        except etree.XMLSchemaValidateError:
            break
    else:
        message = (
            f"stopped after {_MAX_ROUNDS} rounds of unexpected elements; there may be more problems than these"
        )
        issues.append(SchemaIssue(line=None, path=None, message=message))
    issues.sort(key=lambda issue: issue.line or float("inf"))  # stable: document order within a line
    return issues


def _take_out(element: etree._Element) -> None:
    """Remove an element from its parent, keeping the text that follows it (lxml would drop its tail)."""
    parent = element.getparent()
    if parent is None:
        return
    tail = element.tail
    if tail:
        previous = element.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(element)


def _line(value: object) -> int | None:
    """A 1-based line number, or ``None`` for libxml2's 0 (unknown) and anything that is not an int."""
    return value if isinstance(value, int) and value > 0 else None


def _entries(log: object) -> list[etree._LogEntry]:
    """The entries of an lxml error log (iterable at run time; lxml-stubs does not say so)."""
    return list(cast("Iterable[etree._LogEntry]", log))


def _element_at(tree: etree._ElementTree, path: str | None) -> etree._Element | None:
    if not path:
        return None
    try:
        found = tree.xpath(path)
    except etree.XPathError:
        return None
    if isinstance(found, list):
        for node in found:
            if isinstance(node, etree._Element):
                return node
    return None


# ---------------------------------------------------------------------------------------------- messages

# Where each helper element may appear: the acts whose content holds it (a payload also in dial-context).
_HELPERS = {"dial-payload": "payload", "dial-option": "options", "step": "steps", "dial-context": "context"}
_HOMES: dict[str, tuple[str, ...]] = {
    **{
        helper: tuple(name for name, act in SPEECH_ACTS.items() if act.content == content)
        + (("dial-context",) if helper == "dial-payload" else ())
        for helper, content in _HELPERS.items()
    },
    **{act: ("dial",) for act in ACT_NAMES},
}

# The child elements each element may hold.
_CHILDREN: dict[str, tuple[str, ...]] = {
    "dial": ACT_NAMES,
    **{parent: tuple(child for child, homes in _HOMES.items() if parent in homes) for parent in ACT_NAMES},
    "dial-context": ("dial-payload",),
}

# What the element-only elements hold.
_HOLDS: dict[str, str] = {
    "dial": "speech-act elements",
    "dial-execute": "step elements",
    "dial-declare": "one dial-payload element",
    "dial-context": "one dial-payload element",
}

_PREFIX = re.compile(r"Element '(?P<element>[^']*)'(?:, attribute '(?P<attribute>[^']*)')?: (?P<rest>.*)", re.S)
_ENUMERATION = re.compile(
    r"\[facet 'enumeration'\] The value '(?P<value>.*)' is not an element of the set \{(?P<set>.*)\}\.", re.S
)
_FACET = re.compile(r"\[facet '(?P<facet>[A-Za-z]+)'\] The value '(?P<value>.*?)' (?P<reason>.*)", re.S)
_REQUIRED = re.compile(r"The attribute '(?P<name>[^']*)' is required but missing\.")
_NOT_ALLOWED = re.compile(r"The attribute '(?P<name>[^']*)' is not allowed\.")
_NOT_EXPECTED = re.compile(
    r"This element is not expected\.(?: Expected is (?:one of )?\( (?P<expected>.*) \)\.)?", re.S
)
_MISSING = re.compile(r"Missing child element\(s\)\. Expected is (?:one of )?\( (?P<expected>.*) \)\.", re.S)
_DATATYPE = re.compile(
    r"'(?P<value>.*)' is not a valid value of the (?:local )?(?:atomic|union|list) type(?: '(?P<type>[^']*)')?\.",
    re.S,
)
_FIXED = re.compile(r"The value '(?P<value>.*)' does not match the fixed value constraint '(?P<fixed>.*)'\.", re.S)
_DUPLICATE = re.compile(
    r"Duplicate key-sequence \[(?P<key>.*)\] in (?:unique|key) identity-constraint '(?P<constraint>[^']*)'\.", re.S
)
_TEXT_IN_ELEMENT_ONLY = "Character content other than whitespace is not allowed because the content type is"
_TEXT_IN_EMPTY = "Character content is not allowed, because the content type is empty"
_CHILD_IN_EMPTY = "Element content is not allowed, because the content type is empty"
_CHILD_IN_SIMPLE = "Element content is not allowed, because the content type is a simple type definition"
_NO_GLOBAL = "No matching global declaration available for the validation root"

_UNIQUE_SCOPES = {"act-id": "within the envelope", "step-id": "within its dial-execute"}


def _fixed_type_descriptions() -> dict[str, str]:
    return {
        "xs:boolean": "true, false, 1 or 0",
        "seconds": "a number of seconds, 0 or more (such as 30 or 1.5)",
        "xs:unsignedInt": "a whole number from 0 to 4294967295",
        "xs:decimal": "a decimal number",
        "xs:language": "a BCP-47 language tag such as en or pt-BR",
        "xs:anyURI": "a URI",
        "event-list": "a list of event names separated by spaces",
        "name-token": "a non-empty name",
    }


@functools.cache
def _describe_type(type_name: str) -> str:
    fixed = _fixed_type_descriptions()
    if type_name in fixed:
        return fixed[type_name]
    listed = known_values(type_name)
    if listed:
        example = {"signal": " such as session-complete", "env": " such as mcp:github"}.get(type_name, "")
        other = "another actor id" if type_name == "actor" else f"another name{example}"
        return f"a non-empty name: {', '.join(listed)} or {other}"
    return f"a valid {type_name}"


def _quoted_names(text: str) -> list[str]:
    return re.findall(r"'([^']*)'", text)


def _join_or(names: tuple[str, ...]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _strip_index(step: str) -> str:
    return re.sub(r"\[\d+\]$", "", step)


def _parent_name(path: str | None) -> str | None:
    if not path:
        return None
    steps = [_strip_index(step) for step in path.split("/") if step]
    return steps[-2] if len(steps) >= 2 else None


_Root = etree._Element | etree._ElementTree


def _first_child_name(root: _Root | None, path: str | None) -> str | None:
    if root is None:
        return None
    tree = root if isinstance(root, etree._ElementTree) else root.getroottree()
    element = _element_at(tree, path)
    if element is None:
        return None
    for child in element:
        if isinstance(child.tag, str):
            return str(child.tag)
    return None


def describe_lxml_error(entry: etree._LogEntry, *, root: _Root | None = None) -> str:
    """A readable sentence for one entry of an lxml ``XMLSchema.error_log``.

    The sentence starts with the element at fault and names the attribute or child, e.g.
    ``dial-declare: missing required attribute 'context-key'`` or ``dial-inform: unexpected child element
    'dial-option' (dial-option belongs inside dial-ask)``. Pass the validated tree (or its root) as ``root`` to
    name the child element in messages where libxml2 does not (text-only and empty elements).
    Entries this function does not recognise keep libxml2's wording after the element name.
    """
    raw = str(entry.message).strip()
    match = _PREFIX.fullmatch(raw)
    if not match:
        return raw
    element = match.group("element")
    attribute = match.group("attribute")
    rest = match.group("rest").strip()
    if attribute is not None:
        return f"{element}: {_describe_attribute(attribute, rest)}"
    if m := _NOT_EXPECTED.fullmatch(rest):
        return _describe_unexpected(element, _parent_name(entry.path), m.group("expected"))
    return f"{element}: {_describe_element(element, rest, entry.path, root)}"


def _describe_attribute(attribute: str, rest: str) -> str:
    if m := _ENUMERATION.fullmatch(rest):
        allowed = ", ".join(_quoted_names(m.group("set")))
        return f"attribute '{attribute}' must be one of {allowed}; got '{m.group('value')}'"
    if m := _DATATYPE.fullmatch(rest):
        expected = _describe_type(m.group("type")) if m.group("type") else "a valid value"
        return f"attribute '{attribute}' must be {expected}; got '{m.group('value')}'"
    if m := _FIXED.fullmatch(rest):
        return f"attribute '{attribute}' must be '{m.group('fixed')}'; got '{m.group('value')}'"
    if m := _NOT_ALLOWED.fullmatch(rest):
        return (
            f"unknown attribute '{attribute}' is not allowed here "
            "(an extension attribute needs a namespace prefix in the strict schema)"
        )
    if m := _FACET.fullmatch(rest):
        value, reason = m.group("value"), m.group("reason")
        limit = re.search(r"\('(?P<limit>[^']*)'\)", reason)
        bound = limit.group("limit") if limit else ""
        facet = m.group("facet")
        if facet == "minInclusive":
            return f"attribute '{attribute}' must be {bound} or more; got '{value}'"
        if facet == "maxInclusive":
            return f"attribute '{attribute}' must be {bound} or less; got '{value}'"
        return f"attribute '{attribute}' has an invalid value '{value}': {reason.rstrip('.')}"
    return f"attribute '{attribute}': {rest}"


def _describe_element(element: str, rest: str, path: str | None, root: _Root | None) -> str:
    if m := _REQUIRED.fullmatch(rest):
        return f"missing required attribute '{m.group('name')}'"
    if m := _MISSING.fullmatch(rest):
        names = [name.strip() for name in m.group("expected").split(",")]
        if len(names) == 1:
            return f"missing required child element '{names[0]}'"
        return f"missing a child element; expected one of {', '.join(names)}"
    if m := _DATATYPE.fullmatch(rest):
        expected = _describe_type(m.group("type")) if m.group("type") else "a valid value"
        return f"content must be {expected}; got '{m.group('value')}'"
    if m := _DUPLICATE.fullmatch(rest):
        keys = ", ".join(f"'{key}'" for key in _quoted_names(m.group("key")))
        scope = _UNIQUE_SCOPES.get(m.group("constraint"), f"(constraint '{m.group('constraint')}')")
        return f"duplicate id {keys}; ids must be unique {scope}"
    if rest.startswith(_TEXT_IN_ELEMENT_ONLY):
        if element == "dial-declare":
            return (
                "text is not allowed here; put the value in a dial-payload "
                "(a bare JSON body is accepted by the lenient schema only)"
            )
        holds = _HOLDS.get(element)
        return f"text is not allowed here; {element} holds only {holds}" if holds else "text is not allowed here"
    if rest.startswith(_TEXT_IN_EMPTY):
        return f"text is not allowed here; {element} must be empty (write it self-closing)"
    if rest.startswith(_CHILD_IN_EMPTY):
        child = _first_child_name(root, path)
        what = f"unexpected child element '{child}'" if child else "child elements are not allowed"
        return f"{what}; {element} must be empty"
    if rest.startswith(_CHILD_IN_SIMPLE):
        child = _first_child_name(root, path)
        what = f"unexpected child element '{child}'" if child else "child elements are not allowed"
        return f"{what}; {element} holds text only (write a literal '<' as &lt;)"
    if rest.startswith(_NO_GLOBAL):
        return "the root element of a DIAL document must be 'dial'"
    return rest


def _describe_unexpected(child: str, parent: str | None, expected: str | None) -> str:
    if parent is None:
        return f"{child}: this element is not expected here"
    head = f"{parent}: unexpected child element '{child}'"
    homes = _HOMES.get(child)
    if homes is None:
        # libxml2 lists the expected elements only sometimes: use the spec's table, else libxml2's list.
        if parent in _CHILDREN:
            allowed = _CHILDREN[parent]
        else:
            allowed = tuple(name.strip() for name in (expected or "").split(",") if name.strip())
        if allowed:
            return f"{head} (not a DIAL element; {parent} holds {_join_or(allowed)})"
        if parent in _CHILDREN:
            return f"{head} (not a DIAL element; {parent} holds no child elements)"
        return f"{head} (not a DIAL element)"
    if parent in homes:
        return f"{head} (at most one {child} is allowed here)"
    if homes == ("dial",):
        return f"{head} (a speech act goes directly inside dial)"
    return f"{head} ({child} belongs inside {_join_or(homes)})"
