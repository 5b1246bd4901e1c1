"""Find the ``<dial>`` envelope in an agent's reply and parse it into frozen records.

An envelope candidate starts at a ``<dial`` start tag proper (``<dial>``, ``<dial …>``, ``<dial/>``; never
``<dialog>`` or a ``<dial-ask>`` mentioned in prose) that is not inside Markdown inline code, and ends at the
first ``</dial>`` (whitespace allowed before the ``>``) that is not inside a comment, a CDATA section or a
processing instruction; without an end it runs to the end of the reply. The envelope is the first candidate whose
elements carry content, else the first (see :func:`parse`). Only the envelope is handed to lxml,
so the prose around it (an XML declaration, a DOCTYPE, stray markup) is never parsed.

The envelope is parsed by libxml2 with entity expansion, DTD loading and network access off, its size limits on,
comments and processing instructions dropped and CDATA read as text. A well-formed envelope takes that fast path.
Anything else is repaired without inventing elements and parsed again in recovery mode, each repair and each
libxml2 complaint becoming a :class:`~dial_runtime.language.records.ParseIssue` with code ``"recovered"``.
Only the five predefined entities and character references are decoded: any other entity reference is kept as
literal text (code ``"entity"``) and a DOCTYPE inside the envelope is dropped (code ``"doctype"``), so nothing is
ever expanded, fetched or read. The tree is then checked against the lenient XSD (code ``"schema"``).

Other issue codes: ``"unknown-element"``, ``"misplaced-element"``, ``"nested-element"`` (a speech act inside
another one: ignored, not promoted), ``"extra-payload"``, ``"extra-context"``, ``"invalid-json"``,
``"invalid-attribute"``, ``"extra-envelope"`` (a later envelope, left in the prose; one that carries content
counts in ``Envelope.candidates``, which the runtime refuses above one),
``"quoted-envelope"`` (a candidate without content read as prose, a later one having content) and
``"empty-envelope"`` (elements, none of which carries content).
Lines are 1-based in the whole reply. At most :data:`MAX_ISSUES_PER_CODE` issues are listed per code, plus one
that counts the rest, so a hostile reply cannot make the list grow without bound.

Time is linear in the size of the reply: every scan moves forward only (at most :data:`MAX_CANDIDATES`
candidates are read), and the schema check is cut into windows
when an element has many children (libxml2's error paths would otherwise cost quadratic time).
``parse`` may be called from several threads at once.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, cast

import msgspec
from lxml import etree

from dial_runtime.errors import DialSizeError
from dial_runtime.language.acts import (
    ELEMENT_TYPES,
    HELPER_ATTRIBUTES,
    SPEECH_ACTS,
    Attributes,
    Content,
    ValueKind,
)
from dial_runtime.language.hardening import HARDENED_OPTIONS, hardened_parser
from dial_runtime.language.records import (
    Element,
    Envelope,
    Option,
    ParseIssue,
    RootAttributes,
    Step,
    carries_content,
)
from dial_runtime.language.schema import describe_lxml_error, lxml_schema

__all__ = [
    "DEFAULT_MAX_REPLY_SIZE",
    "DEFAULT_MAX_SIZE",
    "HARDENED_OPTIONS",
    "MAX_ISSUES_PER_CODE",
    "envelope_candidates",
    "extract_prose",
    "parse",
    "unfenced",
]

DEFAULT_MAX_SIZE: Final = 8 * 1024 * 1024
"""The largest envelope :func:`parse` accepts, in bytes of UTF-8."""

DEFAULT_MAX_REPLY_SIZE: Final = 16 * 1024 * 1024
"""The largest reply, prose included, :func:`parse` and ``StreamParser`` accept, in bytes of UTF-8."""

MAX_CANDIDATES: Final = 16
"""Envelope candidates :func:`parse` reads at most, looking for one whose elements carry content."""

MAX_ISSUES_PER_CODE: Final = 100
"""Issues listed per code in one envelope; the rest are counted in one more issue."""

# Above this many '=' in an envelope, attributes are read by name (see _fields).
_MANY_ATTRIBUTES: Final = 256
# Schema validation looks at no more than this many siblings at a time (see _windows).
_WINDOW: Final = 64


# One strict parser per thread: a push parser holds its document between feed() and close().
_STRICT = threading.local()
# One per thread: recovery reads the parser's error log after the parse.
_RECOVERY = threading.local()
_RESOURCE_LIMIT: Final = int(etree.ErrorTypes.ERR_RESOURCE_LIMIT)
_SCHEMA_LOCK: Final = threading.Lock()

# ---------------------------------------------------------------------------------------------- locating

_START: Final = re.compile(r"<dial(?=[\s/>])")
# The rest of a start tag, quote-aware; each alternative starts with a different character and none crosses a
# '<', so a failed attempt costs at most the distance to the next '<'.
_TAG_TAIL: Final = re.compile(r"""[^<>"']*(?:(?:"[^"<]*"|'[^'<]*')[^<>"']*)*>""")
_LOOSE_TAG_TAIL: Final = re.compile(r"[^<>]*>")
_END_SCAN: Final = re.compile(r"</dial\s*>|<!--|<!\[CDATA\[|<\?")
_TERMINATORS: Final = {"<!--": "-->", "<![CDATA[": "]]>", "<?": "?>"}


class _InlineCode:
    """Tells whether positions of a text, asked in increasing order, lie inside a Markdown inline code span.

    A span is a run of backticks closed by a run of the same length later on the same line; a run with no such
    close is literal, and a run of three or more at a line's start opens a fence (whose content is not inline
    code: an envelope written inside a fenced block counts). Runs longer than eight backticks are literal. Every
    search moves forward only, so all questions together cost time linear in the text.
    """

    __slots__ = ("closes", "newline", "pos", "span_end", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.span_end = -1
        self.newline = -2
        self.closes: dict[int, int] = {}

    def inside(self, at: int) -> bool:
        if at < self.span_end:
            return True
        text, pos = self.text, max(self.pos, self.span_end)
        while (run := _TICKS.search(text, pos, at)) is not None:
            start, pos = run.start(), run.end()
            length = pos - start
            if length > 8 or (length >= 3 and (start == 0 or text[start - 1] == "\n")):
                continue
            close = self.close(length, pos)
            if close != -1 and close < self.line_end(pos):
                pos = self.span_end = close + length
                if at < pos:
                    self.pos = start
                    return True
        self.pos = at
        return False

    def close(self, length: int, pos: int) -> int:
        found = self.closes.get(length, -2)
        if found != -1 and found < pos:
            match = _CLOSING_TICKS[length].search(self.text, pos)
            found = self.closes[length] = match.start() if match is not None else -1
        return found

    def line_end(self, pos: int) -> int:
        if self.newline != -1 and self.newline < pos:
            self.newline = self.text.find("\n", pos)
        return len(self.text) if self.newline == -1 else self.newline


_TICKS: Final = re.compile("`+")
_CLOSING_TICKS: Final = {length: re.compile(f"(?<!`)`{{{length}}}(?!`)") for length in range(1, 9)}


def _find_start(text: str, pos: int, code: _InlineCode | None = None) -> tuple[int, int, bool] | None:
    """The next ``<dial`` start tag proper at or after ``pos``, outside inline code: (start, end of the tag,
    self-closing). ``code`` tracks the text's inline code spans (``None``: the text has no backtick)."""
    while True:
        match = _START.search(text, pos)
        if match is None:
            return None
        if code is not None and code.inside(match.start()):
            pos = match.end()
            continue
        if text.startswith(">", match.end()):  # the common bare <dial>
            return match.start(), match.end() + 1, False
        tail = _TAG_TAIL.match(text, match.end()) or _LOOSE_TAG_TAIL.match(text, match.end())
        if tail is not None:
            end = tail.end()
            return match.start(), end, text[end - 2] == "/"
        pos = match.end()


def _find_end(text: str, pos: int) -> tuple[int, bool]:
    """Where the envelope whose content starts at ``pos`` ends, and whether it has a ``</dial>``.

    An unterminated comment, CDATA section or processing instruction is read as text. Each terminator is searched
    for forward only (its next position is remembered), so the scan stays linear.
    """
    match = _END_SCAN.search(text, pos)
    if match is not None and match.group()[1] == "/":  # the common case: nothing to skip on the way
        return match.end(), True
    next_terminator: dict[str, int] = {}
    while True:
        match = _END_SCAN.search(text, pos)
        if match is None:
            return len(text), False
        terminator = _TERMINATORS.get(match.group())
        if terminator is None:
            return match.end(), True
        found = next_terminator.get(terminator, -2)
        if found != -1 and found < match.end():
            found = text.find(terminator, match.end())
            next_terminator[terminator] = found
        pos = match.end() if found == -1 else found + len(terminator)


def _parse_strictly(data: bytes) -> etree._Element:
    """The root of well-formed XML, read with :data:`HARDENED_OPTIONS`; ``XMLSyntaxError`` for anything else.

    lxml's push interface (feed, then close) reads a short envelope with a quarter fewer instructions than
    ``fromstring``, which sets up a buffered reader first. A document that fails leaves the parser ready for the
    next one: ``feed`` resets it when it raises, and ``close`` always does.
    """
    parser: etree.XMLParser | None = getattr(_STRICT, "parser", None)
    if parser is None:
        parser = _STRICT.parser = hardened_parser(recover=False)
    parser.feed(data)
    return parser.close()


def _locate(text: str, pos: int, code: _InlineCode | None = None) -> tuple[int, int, int, bool] | None:
    """The next envelope candidate at or after ``pos``: (start, end of its start tag, end, has its end tag)."""
    start = _find_start(text, pos, code)
    if start is None:
        return None
    begin, tag_end, self_closing = start
    if self_closing:
        return begin, tag_end, tag_end, True
    end, closed = _find_end(text, tag_end)
    return begin, tag_end, end, closed


def _inline_code(text: str) -> _InlineCode | None:
    return _InlineCode(text) if "`" in text else None


def extract_prose(text: str) -> str:
    """The reply without its envelope, ends trimmed (internal whitespace is kept).

    ``"Hello <dial>…</dial> bye"`` gives ``"Hello  bye"``. The envelope is the one :func:`parse` reads (see
    there), so a ``<dial>`` quoted in prose stays in it, and so does a later envelope: nothing the agent wrote
    disappears unreported. With no envelope the whole reply is returned, trimmed. A Markdown code fence around
    the envelope is not prose (see :func:`unfenced`).
    """
    found = envelope_bounds(text)
    if found is None:
        return text.strip()
    start, end, _ = found
    return _prose_around(text, start, end)


#: A Markdown code fence that opens right before an envelope: three or more backticks, an optional info string
#: (``xml``), on a line of its own at the end of the prose before it.
OPENING_FENCE: Final = re.compile(r"(?:\A|\n)[ \t]*`{3,}[ \t]*[\w+.-]*[ \t]*\s*\Z")
#: The fence that closes it: on the first line of the prose after the envelope.
CLOSING_FENCE: Final = re.compile(r"\A\s*`{3,}[ \t]*(?=\n|\Z)")


def unfenced(before: str, after: str) -> tuple[str, str]:
    """The prose before and after an envelope without the Markdown code fence a model wrapped the envelope in
    (`````xml`` on the last line before it, ````` on the first line after it), which is markup of the reply,
    not words for the person; each end is taken off on its own (a fence left open, or only closed, too)."""
    opening = OPENING_FENCE.search(before) if "`" in before else None
    closing = CLOSING_FENCE.match(after) if "`" in after else None
    return (
        before if opening is None else before[: opening.start()],
        after if closing is None else after[closing.end() :],
    )


def _prose_around(text: str, start: int, end: int) -> str:
    """The prose of ``text`` around the envelope at ``start:end``, unfenced, ends trimmed."""
    before, after = unfenced(text[:start], text[end:])
    return (before + after).strip()


def envelope_bounds(text: str) -> tuple[int, int, bool] | None:
    """Where the envelope :func:`parse` reads lies in ``text``: (start, end, whether it has its end tag);
    ``None`` when there is none.

    With a single candidate nothing is parsed; with several, the first ones are (see :func:`parse`).
    """
    code = _inline_code(text)
    found = _locate(text, 0, code)
    if found is None:
        return None
    if _START.search(text, found[1]) is not None:  # maybe several candidates: the one parse reads
        with contextlib.suppress(DialSizeError):
            first = _read(text, found, DEFAULT_MAX_SIZE, schema=False)
            chosen = first if first.usable else _later_candidate(text, code, first, DEFAULT_MAX_SIZE, False)[0]
            found = chosen.found
    return found[0], found[2], found[3]


# ---------------------------------------------------------------------------------------------- issues


class _Issues(msgspec.Struct):
    """Collects issues, listing at most :data:`MAX_ISSUES_PER_CODE` per code.

    ``wide`` records that some element has more than :data:`_WINDOW` children, which validation must know;
    ``many_attributes`` that the envelope may have elements with many attributes, which reading them must know.
    A Struct: one is made for every reply, in half the instructions a class with an ``__init__`` takes.
    """

    many_attributes: bool = False
    wide: bool = False
    items: list[ParseIssue] = msgspec.field(default_factory=list)
    counts: dict[str, int] = msgspec.field(default_factory=dict)

    def full(self, code: str) -> bool:
        return self.counts.get(code, 0) >= MAX_ISSUES_PER_CODE

    def add(self, code: str, message: str, line: int | None) -> None:
        count = self.counts.get(code, 0) + 1
        self.counts[code] = count
        if count <= MAX_ISSUES_PER_CODE:
            self.items.append(ParseIssue(code=code, message=message, line=line))

    def result(self) -> tuple[ParseIssue, ...]:
        if not self.counts:
            return ()
        for code, count in self.counts.items():
            if count > MAX_ISSUES_PER_CODE:
                message = f"{count - MAX_ISSUES_PER_CODE} more '{code}' issues are not listed"
                self.items.append(ParseIssue(code=code, message=message, line=None))
        return tuple(self.items)


# ---------------------------------------------------------------------------------------------- repair

_REPAIR_SCAN: Final = re.compile(
    r"(?P<ref>&)|(?P<comment><!--)|(?P<cdata><!\[CDATA\[)|(?P<pi><\?)|(?P<doctype><!(?i:doctype))"
    r"|(?P<end></(?=[^\W\d]|:))|(?P<tag><(?=[^\W\d]|:))|(?P<lt><)|(?P<cdata_end>\]\]>)"
)
_REF: Final = re.compile(r"&(?:#([0-9]+)|#x([0-9a-fA-F]+)|([^\W\d][\w.:-]*|:[\w.:-]*));")


def _surrogate(ref: re.Match[str]) -> int | None:
    """The code point a numeric character reference (a ``_REF`` match) names, if it is a surrogate."""
    decimal, hexadecimal = ref.group(1), ref.group(2)
    if decimal is not None:
        code = int(decimal[-7:]) if len(decimal.lstrip("0")) <= 7 else 0
    elif hexadecimal is not None:
        code = int(hexadecimal[-6:], 16) if len(hexadecimal.lstrip("0")) <= 6 else 0
    else:
        return None
    return code if 0xD800 <= code <= 0xDFFF else None


_PREDEFINED: Final = frozenset({"amp", "lt", "gt", "quot", "apos"})
_AMP: Final = re.compile("&")
_TAG_NAME: Final = re.compile(r"""[^\s/>"'<=&]+""")
_ATTRIBUTE: Final = re.compile(
    r"""(\s*)([^\s=/>"'<&]+)(?:(\s*=\s*)(?:"([^"<]*)"|'([^'<]*)'|((?:[^\s"'<>=`/]|/(?!>))+)))?"""
)
_TAG_CLOSE: Final = re.compile(r"\s*/?>")
# A start tag that needs no repair: quoted values without '<' or '&'. Bounded by the next '<' like the rest.
_CLEAN_START_TAG: Final = re.compile(
    r"""<([^\s/>"'<=&]+)(?:\s+[^\s=/>"'<&]+\s*=\s*(?:"[^"<&]*"|'[^'<&]*'))*\s*(/?)>"""
)
_SPACE: Final = re.compile(r"\s*")
_SUBSET_END: Final = re.compile(r"\]\s*>")
_DOCTYPE_HEAD: Final = re.compile(r"[^\[>]*")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_SECTION_TERMINATORS: Final = {"comment": "-->", "cdata": "]]>", "pi": "?>"}
_SECTION_NAMES: Final = {"comment": "comment", "cdata": "CDATA section", "pi": "processing instruction"}


class _Repairer:
    """Rewrites a malformed envelope into text libxml2 recovers from without losing what the agent wrote.

    - raw ``&``, ``<`` and ``]]>`` in text become references; an undefined entity reference becomes literal text;
    - unquoted attribute values get quotes;
    - unclosed elements are closed where an enclosing element ends (or at the end); an end tag that closes no
      open element becomes text;
    - a DOCTYPE is dropped (its newlines kept, so lines stay right);
    - an unterminated comment, CDATA section or processing instruction becomes text.

    Every rewrite is recorded. One forward pass; a tag is examined up to the next ``<`` at most.
    """

    def __init__(self, raw: str, base: int, issues: _Issues) -> None:
        self.raw = raw
        self.issues = issues
        self.out: list[str] = []
        self.copied = 0
        self.line_pos = 0
        self.line = base + 1
        self.next_terminator: dict[str, int] = {}
        self.open_tags: list[str] = []
        self.open_counts: dict[str, int] = {}

    def line_at(self, pos: int) -> int:
        if pos > self.line_pos:
            self.line += self.raw.count("\n", self.line_pos, pos)
            self.line_pos = pos
        return self.line

    def replace(self, start: int, end: int, replacement: str) -> None:
        self.out.append(self.raw[self.copied : start])
        self.out.append(replacement)
        self.copied = end

    def run(self) -> str:
        raw = self.raw
        scan = 0
        while True:
            match = _REPAIR_SCAN.search(raw, scan)
            if match is None:
                break
            kind = match.lastgroup
            at = match.start()
            if kind == "ref":
                scan = self.reference(at)
            elif kind in _SECTION_TERMINATORS:
                scan = self.section(kind, at, match.end())
            elif kind == "doctype":
                scan = self.doctype(at, match.end())
            elif kind == "tag":
                scan = self.tag(at)
            elif kind == "end":
                scan = self.end_tag(at)
            elif kind == "lt":
                self.escape_lt(at, "a '<' that starts no tag")
                scan = at + 1
            else:
                self.replace(at, match.end(), "]]&gt;")
                self.issues.add("recovered", "']]>' in text written as ']]&gt;'", self.line_at(at))
                scan = match.end()
        self.out.append(raw[self.copied :])
        if self.open_tags:
            line = self.line_at(len(raw))
            for depth in range(len(self.open_tags) - 1, -1, -1):
                name = self.open_tags[depth]
                self.out.append(f"</{name}>")
                if depth:  # the root's missing end tag is reported by the caller
                    self.issues.add(
                        "recovered", f"<{name}> was not closed; closed at the end of the envelope", line
                    )
        return "".join(self.out)

    def escape_lt(self, at: int, what: str) -> None:
        self.replace(at, at + 1, "&lt;")
        self.issues.add("recovered", f"{what} kept as text", self.line_at(at))

    def fix_reference(self, text: str, at: int, line: int) -> tuple[str, int, int]:
        """What replaces the ``&`` at ``at`` in ``text``: (replacement, end of what it replaces, scan resumes).

        A character reference to a surrogate is decoded when a high one is followed by a low one (UTF-16
        serialisers write a character outside the BMP so) and replaced by U+FFFD otherwise.
        """
        ref = _REF.match(text, at)
        if ref is None:
            self.issues.add("recovered", "a raw '&' written as '&amp;'", line)
            return "&amp;", at + 1, at + 1
        name = ref.group(3)
        if name is None:
            code = _surrogate(ref)
            if code is None:
                return "&", at, ref.end()
            if code < 0xDC00:
                low = _REF.match(text, ref.end())
                low_code = _surrogate(low) if low is not None else None
                if low is not None and low_code is not None and low_code >= 0xDC00:
                    combined = 0x10000 + ((code - 0xD800) << 10) + (low_code - 0xDC00)
                    return f"&#x{combined:X};", low.end(), low.end()
            self.issues.add(
                "recovered", f"a reference to a lone surrogate ({ref.group()}) replaced by U+FFFD", line
            )
            return "\ufffd", ref.end(), ref.end()
        if name in _PREDEFINED:
            return "&", at, ref.end()
        self.issues.add(
            "entity",
            f"entity reference '&{name};' kept as text: only the five XML entities and character "
            "references are decoded, nothing is expanded or fetched",
            line,
        )
        return "&amp;", at + 1, at + 1

    def reference(self, at: int) -> int:
        replacement, replaced_end, resume = self.fix_reference(self.raw, at, self.line_at(at))
        if replaced_end > at:
            self.replace(at, replaced_end, replacement)
        return resume

    def fix_value(self, value: str, line: int) -> str:
        if "&" not in value:
            return value
        parts: list[str] = []
        copied = scan = 0
        while (match := _AMP.search(value, scan)) is not None:
            replacement, replaced_end, scan = self.fix_reference(value, match.start(), line)
            if replaced_end > match.start():
                parts.append(value[copied : match.start()])
                parts.append(replacement)
                copied = replaced_end
        parts.append(value[copied:])
        return "".join(parts)

    def section(self, kind: str, at: int, content: int) -> int:
        terminator = _SECTION_TERMINATORS[kind]
        found = self.next_terminator.get(terminator, -2)
        if found != -1 and found < content:
            found = self.raw.find(terminator, content)
            self.next_terminator[terminator] = found
        if found == -1:
            self.escape_lt(at, f"an unterminated {_SECTION_NAMES[kind]}")
            return at + 1
        return found + len(terminator)

    def doctype(self, at: int, after_keyword: int) -> int:
        raw = self.raw
        head = _DOCTYPE_HEAD.match(raw, after_keyword)
        end = head.end() if head is not None else after_keyword
        if end < len(raw) and raw[end] == "[":
            subset_end = _SUBSET_END.search(raw, end)
            end = subset_end.end() if subset_end is not None else len(raw)
        else:
            end = min(end + 1, len(raw))
        self.replace(at, end, "\n" * raw.count("\n", at, end))
        self.issues.add(
            "doctype",
            "a DOCTYPE inside the envelope was dropped: DIAL takes none and its entities are never expanded",
            self.line_at(at),
        )
        return end

    def end_tag(self, at: int) -> int:
        """Close the open elements up to this end tag's, writing the missing end tags.

        libxml2's own recovery from mismatched tags misplaces and drops text, so it is not left to it. An end tag
        that closes no open element is kept as text.
        """
        name = _TAG_NAME.match(self.raw, at + 2)
        tag = name.group() if name is not None else ""
        if self.open_tags and self.open_tags[-1] == tag:
            self.open_tags.pop()
            self.open_counts[tag] -= 1
            return at + 2 + len(tag)
        if not self.open_counts.get(tag):
            self.escape_lt(at, f"an end tag </{tag}> that closes no open element")
            return at + 1
        unclosed = []
        while (top := self.open_tags.pop()) != tag:
            self.open_counts[top] -= 1
            unclosed.append(top)
        self.open_counts[tag] -= 1
        if unclosed:
            self.replace(at, at, "".join(f"</{inner}>" for inner in unclosed))
            line = self.line_at(at)
            for inner in unclosed:
                self.issues.add("recovered", f"<{inner}> was not closed; closed before </{tag}>", line)
        return at + 2 + len(tag)

    def open(self, name: str) -> None:
        self.open_tags.append(name)
        self.open_counts[name] = self.open_counts.get(name, 0) + 1

    def tag(self, at: int) -> int:
        raw = self.raw
        clean = _CLEAN_START_TAG.match(raw, at)
        if clean is not None:
            if not clean.group(2):
                self.open(clean.group(1))
            return clean.end()
        name = _TAG_NAME.match(raw, at + 1)
        pos = name.end() if name is not None else at + 1
        pieces = [raw[at:pos]]
        changed = False
        line = self.line_at(at)
        while (attribute := _ATTRIBUTE.match(raw, pos)) is not None:
            space, attr_name, equals, double, single, bare = attribute.groups()
            pos = attribute.end()
            if not space:  # only possible right after a quoted value
                space = " "
                changed = True
                self.issues.add("recovered", f"a space inserted before attribute '{attr_name}'", line)
            if equals is None:
                pieces.append(space + attr_name)
                continue
            if bare is not None:
                changed = True
                self.issues.add("recovered", f"unquoted value of attribute '{attr_name}' quoted", line)
                pieces.append(f'{space}{attr_name}{equals}"{self.fix_value(bare, line)}"')
            else:
                quote = '"' if double is not None else "'"
                value = double if double is not None else single
                fixed = self.fix_value(value, line)
                changed = changed or fixed != value
                pieces.append(f"{space}{attr_name}{equals}{quote}{fixed}{quote}")
        close = _TAG_CLOSE.match(raw, pos)
        if close is not None:
            if changed:
                self.replace(at, close.end(), "".join(pieces) + close.group())
            if name is not None and not close.group().endswith("/>"):
                self.open(name.group())
            return close.end()
        if at == 0:  # the root's start tag: left to libxml2, never turned into text, and its end tag still ends it
            if name is not None:
                self.open(name.group())
            return pos
        rest = _SPACE.match(raw, pos)
        after = rest.end() if rest is not None else pos
        if after == len(raw) or raw[after] == "<":
            self.escape_lt(at, "a '<' that starts no complete tag")
            return at + 1
        return pos


def _recover(raw: str, base: int, issues: _Issues, *, repair: bool) -> etree._Element | None:
    """Parse a malformed envelope in recovery mode, repaired first; ``None`` when libxml2 builds no root.

    ``repair=False`` when the strict parse stopped at a libxml2 limit (such as the nesting depth): everything
    before that point was well-formed and nothing after it is read, so there is nothing to repair.
    """
    if _SURROGATE.search(raw) is not None:
        raw = _SURROGATE.sub("\ufffd", raw)
        issues.add("recovered", "lone surrogate code points replaced by U+FFFD", base + 1)
    repaired = _Repairer(raw, base, issues).run() if repair else raw
    parser: etree.XMLParser | None = getattr(_RECOVERY, "parser", None)
    if parser is None:
        parser = hardened_parser(recover=True)
        _RECOVERY.parser = parser
    root: etree._Element | None
    try:
        root = etree.fromstring(repaired.encode(), parser)
    except etree.XMLSyntaxError as error:
        root = None
        log: Iterable[etree._LogEntry] = cast("Iterable[etree._LogEntry]", error.error_log)
    else:
        log = cast("Iterable[etree._LogEntry]", parser.error_log)
    for entry in log:
        issues.add("recovered", str(entry.message).strip(), _entry_line(entry.line, base))
    return root


def _entry_line(line: object, base: int) -> int | None:
    return base + line if isinstance(line, int) and line > 0 else None


# ---------------------------------------------------------------------------------------------- values

_U32: Final = re.compile(r"\+?([0-9]+)\Z")
_DECIMAL: Final = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*\Z")
_U32_MAX: Final = 4294967295
_JSON_TYPE: Final = "application/json"
_KNOWN_NON_ACTS: Final = frozenset({"dial", "dial-payload", "dial-option", "dial-context", "step"})


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


_JSON: Final = json.JSONDecoder(parse_constant=_reject_constant)


def _is_json(mime: str | None) -> bool:
    if mime is None:
        return True
    essence = mime.split(";", 1)[0].strip().lower()
    return essence == _JSON_TYPE or essence.endswith("+json")


def _line(element: etree._Element, base: int) -> int:
    """The element's 1-based line in the whole reply."""
    line = element.sourceline
    return base + line if isinstance(line, int) else base + 1


def _stray(child: etree._Element, parent: str, issues: _Issues, base: int, *, as_text: bool = False) -> None:
    """Report a child the parent does not hold (a misplaced, nested or unknown element); it is not read, but for
    an unknown one inside text (``as_text``: inline markup, whose text is kept)."""
    tag = child.tag
    if tag in ELEMENT_TYPES:
        code, message = "nested-element", f"<{tag}> inside <{parent}> is ignored: speech acts are not nested"
    elif tag in _KNOWN_NON_ACTS:
        code, message = "misplaced-element", f"<{tag}> is not allowed inside <{parent}>; it is ignored"
    elif as_text:
        code, message = "unknown-element", f"<{tag}> inside <{parent}> is not a DIAL element; its text is kept"
    else:
        code, message = "unknown-element", f"<{tag}> inside <{parent}> is not a DIAL element; it is ignored"
    issues.add(code, message, _line(child, base))


def _inline(child: etree._Element) -> bool:
    """Whether a child is inline markup (``<b>``, ``<em>``, ``<code>``: no DIAL element, none inside it), whose
    text is read as part of its parent's."""
    if not isinstance(child.tag, str) or child.tag in ELEMENT_TYPES or child.tag in _KNOWN_NON_ACTS:
        return False
    return all(
        inner.tag not in ELEMENT_TYPES and inner.tag not in _KNOWN_NON_ACTS for inner in child.iterdescendants()
    )


_NO_CHILDREN: Final[tuple[etree._Element, ...]] = ()


def _content(
    element: etree._Element, allowed: str | None, issues: _Issues, base: int
) -> tuple[str | None, Sequence[etree._Element]]:
    """The element's own text and its children's tails, trimmed (``None`` if empty), and its ``allowed`` children.

    The content of a DIAL child is left out of the text; inline markup (see :func:`_inline`) is read as its text,
    so ``Buy <b>milk</b> today`` reads ``Buy milk today``; children other than ``allowed`` are reported.
    """
    text = element.text
    count = len(element)
    if not count:
        return (text.strip() or None) if text else None, _NO_CHILDREN
    if count > _WINDOW:
        issues.wide = True
    parts = [text or ""]
    found: list[etree._Element] = []
    tag = str(element.tag)
    for child in element:
        if child.tag == allowed:
            found.append(child)
        elif _inline(child):
            _stray(child, tag, issues, base, as_text=True)
            parts.append("".join(str(piece) for piece in child.itertext()))
        else:
            _stray(child, tag, issues, base)
        if child.tail:
            parts.append(child.tail)
    return "".join(parts).strip() or None, found


def _invalid(element: etree._Element, name: str, value: str, expected: str, issues: _Issues, base: int) -> None:
    issues.add("invalid-attribute", f"<{element.tag}> {name}={value!r} is not {expected}", _line(element, base))


def _events(value: str, name: str, element: etree._Element, issues: _Issues, base: int) -> tuple[str, ...]:
    """A ``yield`` list: event names separated by any whitespace."""
    return tuple(value.split())


def _boolean(value: str, name: str, element: etree._Element, issues: _Issues, base: int) -> bool:
    """An ``xs:boolean``: ``true``/``1`` and ``false``/``0``; anything else is false, with an issue."""
    word = value.strip()
    if word in ("true", "1"):
        return True
    if word not in ("false", "0"):
        _invalid(element, name, value, "true, false, 1 or 0; read as false", issues, base)
    return False


def _seconds(value: str, name: str, element: etree._Element, issues: _Issues, base: int) -> float | None:
    """A non-negative number of seconds (fractions allowed); ``None``, with an issue, when unreadable."""
    if _DECIMAL.match(value) is not None:
        seconds = float(value) + 0.0
        if seconds >= 0 and math.isfinite(seconds):
            return seconds
    _invalid(element, name, value, "a number of seconds (0 or more); ignored", issues, base)
    return None


def _unsigned(value: str, name: str, element: etree._Element, issues: _Issues, base: int) -> int | None:
    """An unsigned 32-bit integer (``^\\+?[0-9]+$``); ``None``, with an issue, otherwise."""
    match = _U32.match(value)
    if match is not None:
        digits = match.group(1).lstrip("0") or "0"
        if len(digits) <= 10 and int(digits) <= _U32_MAX:
            return int(digits)
    _invalid(element, name, value, "a whole number from 0 to 4294967295; ignored", issues, base)
    return None


def _payload(payloads: Sequence[etree._Element], parent: str, issues: _Issues, base: int) -> dict[str, Any]:
    """The payload fields read from the first of ``payloads``; later ones are reported."""
    first = payloads[0]
    for extra in payloads[1:]:
        issues.add(
            "extra-payload",
            f"a second <dial-payload> in <{parent}> is ignored; only the first counts",
            _line(extra, base),
        )
    mime = first.get("type")
    raw = (first.text or "") if not len(first) else (_content(first, None, issues, base)[0] or "")
    text = raw.strip()
    fields: dict[str, Any] = {"payload_text": text, "payload_type": _JSON_TYPE if mime is None else mime}
    if not _is_json(mime):
        return fields
    try:
        fields["payload"] = _JSON.decode(text)
        return fields
    except json.JSONDecodeError as error:
        leading = raw[: len(raw) - len(raw.lstrip())].count("\n")
        line = _line(first, base) + leading + error.lineno - 1
        column = f"column {error.colno}" if error.lineno > 1 else f"character {error.colno} of the payload"
        reason = f"{error.msg}: line {line}, {column}"
    except (ValueError, RecursionError) as error:
        line = _line(first, base)
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
    issues.add("invalid-json", f"the <dial-payload> of <{parent}> is not valid JSON: {reason}", line)
    return fields


# ---------------------------------------------------------------------------------------------- speech acts

_Converter = Callable[[str, str, etree._Element, _Issues, int], Any]
# XML attribute name -> (record field, converter or None to keep the string), built from the registry.
_Fields = dict[str, tuple[str, _Converter | None]]

_CONVERTERS: Final[dict[ValueKind, _Converter | None]] = {
    "text": None,
    "events": _events,
    "boolean": _boolean,
    "seconds": _seconds,
    "unsigned": _unsigned,
}


def _converters(attributes: Attributes) -> _Fields:
    return {name: (field, _CONVERTERS[kind]) for name, (field, kind) in attributes.items()}


_ATTRIBUTES: Final[dict[str, _Fields]] = {
    name: _converters(attributes)
    for name, attributes in [
        *((act.name, act.attributes) for act in SPEECH_ACTS.values()),
        *HELPER_ATTRIBUTES.items(),
    ]
}


def _fields(element: etree._Element, table: _Fields, issues: _Issues, base: int) -> dict[str, Any]:
    """The record fields the element's attributes give through ``table``; other attributes are skipped."""
    fields: dict[str, Any] = {}
    if not issues.many_attributes:
        pairs: Sequence[tuple[Any, Any]] = element.items()  # lxml gives str for a tree parsed from text
    else:
        # lxml's items() looks every value up by name, in time quadratic in the number of attributes: read the
        # names, then the values of the few known ones. items() is a third faster for the usual few attributes.
        names = cast("list[str]", element.keys())
        pairs = [(name, cast("str", element.get(name))) for name in names if name in table]
    for name, value in pairs:
        spec = table.get(name)
        if spec is not None:
            field, convert = spec
            fields[field] = value if convert is None else convert(value, name, element, issues, base)
    return fields


def _carrier(element: etree._Element, issues: _Issues, base: int) -> Element:
    """An act of text and an optional ``<dial-payload>`` (inform, suggest, declare)."""
    tag = element.tag
    text, payloads = _content(element, "dial-payload", issues, base)
    fields = _fields(element, _ATTRIBUTES[tag], issues, base)
    if payloads:
        fields.update(_payload(payloads, tag, issues, base))
    return _RECORDS[tag](**fields, line=_line(element, base), text=text)


def _ask(element: etree._Element, issues: _Issues, base: int) -> Element:
    """An act of text and ``<dial-option>`` children (ask)."""
    text, option_elements = _content(element, "dial-option", issues, base)
    options = []
    for option in option_elements:
        label = _content(option, None, issues, base)[0] or ""
        fields = _fields(option, _ATTRIBUTES["dial-option"], issues, base)
        fields.setdefault("value", label)
        options.append(Option(**fields, label=label))
    return _RECORDS[element.tag](
        **_fields(element, _ATTRIBUTES[element.tag], issues, base),
        line=_line(element, base),
        text=text,
        options=tuple(options),
    )


def _execute(element: etree._Element, issues: _Issues, base: int) -> Element:
    """An act of ``<step>`` children (execute)."""
    steps = tuple(
        Step(
            **_fields(step, _ATTRIBUTES["step"], issues, base), command=_content(step, None, issues, base)[0] or ""
        )
        for step in _content(element, "step", issues, base)[1]
    )
    fields = _fields(element, _ATTRIBUTES[element.tag], issues, base)
    return _RECORDS[element.tag](**fields, line=_line(element, base), steps=steps)


def _text_only(element: etree._Element, issues: _Issues, base: int) -> Element:
    """An act of text only (acknowledge)."""
    text = _content(element, None, issues, base)[0]
    fields = _fields(element, _ATTRIBUTES[element.tag], issues, base)
    return _RECORDS[element.tag](**fields, line=_line(element, base), text=text)


def _delegate(element: etree._Element, issues: _Issues, base: int) -> Element:
    """An act of text and the payload of its ``<dial-context>``, not part of the text (delegate)."""
    tag = element.tag
    text, contexts = _content(element, "dial-context", issues, base)
    fields = _fields(element, _ATTRIBUTES[tag], issues, base)
    if contexts:
        for extra in contexts[1:]:
            issues.add(
                "extra-context",
                f"a second <dial-context> in <{tag}> is ignored; only the first counts",
                _line(extra, base),
            )
        payloads = _content(contexts[0], "dial-payload", issues, base)[1]
        if payloads:
            fields.update(_payload(payloads, tag, issues, base))
    return _RECORDS[tag](**fields, line=_line(element, base), text=text)


def _empty(element: etree._Element, issues: _Issues, base: int) -> Element:
    """An act whose content is not read (phatic)."""
    _content(element, None, issues, base)  # the content is dropped, but stray children are still reported
    return _RECORDS[element.tag](
        **_fields(element, _ATTRIBUTES[element.tag], issues, base), line=_line(element, base)
    )


# The record type of each act, as a constructor of any fields.
_RECORDS: Final[dict[str, Callable[..., Element]]] = dict(ELEMENT_TYPES)


_BY_CONTENT: Final[dict[Content, Callable[[etree._Element, _Issues, int], Element]]] = {
    "payload": _carrier,
    "options": _ask,
    "steps": _execute,
    "text": _text_only,
    "context": _delegate,
    "empty": _empty,
}
_BUILDERS: Final = {name: _BY_CONTENT[act.content] for name, act in SPEECH_ACTS.items()}
_NO_ROOT_ATTRIBUTES: Final = RootAttributes()


# ---------------------------------------------------------------------------------------------- parse


# The lenient schema, fetched on first use (compiling it at import would slow every import down).
_schema: etree.XMLSchema | None = None


def _strip_namespaces(root: etree._Element) -> None:
    """Read ``<dial xmlns="…">`` as plain DIAL, as the reference does: drop the default namespace from tags."""
    for element in root.iter():
        if element.tag[:1] == "{":
            element.tag = element.tag.rpartition("}")[2]


def _shell(element: etree._Element, *, first: bool) -> etree._Element:
    """An empty copy of ``element`` with its line; the ``first`` copy also gets its attributes and text.

    Later copies have no attributes, so an attribute error is reported once (the lenient XSD requires none).
    """
    if not first:
        shell = etree.Element(element.tag)
        shell.sourceline = element.sourceline
        return shell
    # A copy keeps line, attributes and text in time linear in their number (copying attributes one by one
    # through lxml's items() would be quadratic); the children are the windows' to place.
    shell = copy.copy(element)
    del shell[:]
    shell.tail = None
    return shell


def _windows(root: etree._Element) -> list[etree._Element]:
    """The tree cut into copies of ``<dial>`` holding at most :data:`_WINDOW` acts of at most as many children.

    libxml2 writes into each error the path of the element at fault, counting the element's preceding siblings
    to do so: many errors among many siblings cost quadratic time. Cut into windows, the same checks cost linear
    time. Only the content models with unbounded children need cutting (the root's acts, an ask's options, an
    execute's steps): elsewhere libxml2 stops at the first unexpected child. The tree is taken apart; the records
    were built from it already.
    """
    pieces: list[etree._Element] = []
    for act in list(root):
        children = list(act)
        if len(children) <= _WINDOW:
            pieces.append(act)
            continue
        for start in range(0, len(children), _WINDOW):
            shell = _shell(act, first=not start)
            shell.extend(children[start : start + _WINDOW])
            pieces.append(shell)
        pieces[-1].tail = act.tail
    windows = []
    for start in range(0, len(pieces), _WINDOW):
        window = _shell(root, first=not start)
        window.extend(pieces[start : start + _WINDOW])
        windows.append(window)
    return windows


def _validate(root: etree._Element, issues: _Issues, base: int) -> None:
    """Check the tree against the lenient XSD; each error becomes a ``"schema"`` issue.

    A tree with more than :data:`_WINDOW` siblings anywhere is checked in windows (see :func:`_windows`).
    """
    global _schema
    schema = _schema
    if schema is None:
        schema = _schema = lxml_schema(strict=False)
    if issues.wide or len(root) > _WINDOW:
        for window in _windows(root):
            _check(schema, window, issues, base)
    else:
        _check(schema, root, issues, base)


def _check(schema: etree.XMLSchema, tree: etree._Element, issues: _Issues, base: int) -> None:
    """Validate one tree. An XMLSchema keeps the log of its last run: validate and read it under the lock."""
    _SCHEMA_LOCK.acquire()
    try:
        if schema.validate(tree):
            return
        entries = list(cast("Iterable[etree._LogEntry]", schema.error_log))
    except etree.XMLSchemaValidateError as error:
        issues.add("schema", f"the schema validator failed: {error}", None)
        return
    finally:
        _SCHEMA_LOCK.release()
    for entry in entries:
        line = _entry_line(entry.line, base)
        if issues.full("schema"):  # only counted from here on: no need to describe it
            issues.add("schema", "", line)
        else:
            issues.add("schema", describe_lxml_error(entry, root=tree), line)


def _extra_envelopes(
    text: str, pos: int, line: int, line_pos: int, issues: _Issues, max_size: int, budget: int
) -> int:
    """Report every later envelope with its line (they stay in the prose); return how many of them carry content,
    reading at most ``budget`` of them (the rest are counted as carrying none)."""
    code = _inline_code(text)
    with_content = 0
    while (found := _locate(text, pos, code)) is not None:
        start, _, pos, _ = found
        line += text.count("\n", line_pos, start)
        line_pos = start
        issues.add(
            "extra-envelope",
            "a later <dial> envelope: a reply holds one envelope; it stays in the prose",
            line,
        )
        if budget > 0:
            budget -= 1
            with contextlib.suppress(DialSizeError):
                with_content += _read(text, found, max_size, schema=False).usable
    return with_content


class _Read(msgspec.Struct, frozen=True):
    """One envelope candidate, read: where it is, what it holds, the issues found so far (a Struct: made for
    every reply, it is built in a third of a named tuple's time)."""

    found: tuple[int, int, int, bool]
    raw: str
    attributes: RootAttributes
    elements: tuple[Element, ...]
    issues: _Issues
    base: int
    usable: bool


def _read(text: str, found: tuple[int, int, int, bool], max_size: int, schema: bool) -> _Read:
    """Read the envelope candidate ``found`` of ``text`` (see :func:`parse`)."""
    start, _, end, closed = found
    raw = text[start:end]
    clean = True
    data: bytes | None = None
    if raw.isascii():
        size = len(raw)
    else:
        try:
            data = raw.encode()
        except UnicodeEncodeError:
            clean = False
            data = raw.encode("utf-8", "surrogatepass")
        size = len(data)
    if size > max_size:
        raise DialSizeError(size, max_size)
    base = text.count("\n", 0, start)
    # Counting needs a text longer than the bound, which most envelopes are not.
    issues = _Issues(len(raw) > _MANY_ATTRIBUTES and raw.count("=") > _MANY_ATTRIBUTES)
    root: etree._Element | None = None
    repair = True
    if clean:
        try:
            root = _parse_strictly(raw.encode() if data is None else data)
        except etree.XMLSyntaxError as error:
            repair = getattr(error, "code", None) != _RESOURCE_LIMIT
    if root is None:
        if not closed:
            issues.add(
                "recovered", "the envelope has no </dial> end tag; it runs to the end of the reply", base + 1
            )
        root = _recover(raw, base, issues, repair=repair)
    attributes = _NO_ROOT_ATTRIBUTES
    elements: list[Element] = []
    if root is not None:
        if root.tag[:1] == "{":
            _strip_namespaces(root)
        if root.attrib:
            attributes = RootAttributes(**_fields(root, _ATTRIBUTES["dial"], issues, base))
        for child in root:
            builder = _BUILDERS.get(child.tag)
            if builder is None:
                _stray(child, "dial", issues, base)
            else:
                elements.append(builder(child, issues, base))
        if schema:
            _validate(root, issues, base)
    return _Read(found, raw, attributes, tuple(elements), issues, base, carries_content(elements))


def _later_candidate(
    text: str, code: _InlineCode | None, first: _Read, max_size: int, schema: bool
) -> tuple[_Read, list[int]]:
    """For a first candidate whose elements carry no content: the first later one that does (of the first
    :data:`MAX_CANDIDATES` in all) and the starts of those skipped before it; when none does, ``first``, with
    nothing skipped."""
    found = first.found
    skipped: list[int] = []
    for _ in range(MAX_CANDIDATES - 1):
        following = _locate(text, found[1], code)  # a later candidate may lie inside this one
        if following is None:
            break
        skipped.append(found[0])
        found = following
        candidate = _read(text, found, max_size, schema)
        if candidate.usable:
            return candidate, skipped
    return first, []


def parse(
    text: str,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    schema: bool = True,
    max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
) -> Envelope | None:
    """Parse the DIAL envelope of an agent's reply; ``None`` when the reply holds none.

    The envelope is the first ``<dial>`` start tag that is not inside Markdown inline code (a span of backticks
    on one line; a fenced code block is no inline code, so an envelope written in one counts) whose elements
    carry content (``Envelope.usable``); a ``<dial>`` passed over for that is reported (``"quoted-envelope"``) and
    stays in the prose. When none of the first :data:`MAX_CANDIDATES` carries content, the first is the envelope,
    and ``"empty-envelope"`` says so when it has elements. Later envelopes stay in the prose
    (``"extra-envelope"``); ``Envelope.candidates`` counts those that carry content with the envelope, since a
    reply with two of them (an example of the format, then the real one) cannot say which it means.

    ``max_size`` limits the envelope (not the prose around it) in bytes of UTF-8; it is checked before any XML
    parsing, and a larger envelope raises :class:`~dial_runtime.errors.DialSizeError`; ``max_reply_size`` limits
    the whole reply likewise (``DialSizeError`` with ``what="reply"``). Never raises on content: whatever could
    not be read as written is repaired or skipped and reported in ``Envelope.issues``.

    ``schema=False`` skips the check against the lenient XSD, whose findings are only ever issues (``"schema"``):
    the elements are the same either way. It is for callers that read the elements and not the issues, as the
    runtime does while a reply has elements to handle.
    """
    if len(text) > max_reply_size // 4:  # a character is at most four bytes: shorter texts are within the limit
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size > max_reply_size:
            raise DialSizeError(size, max_reply_size, what="reply")
    code = _inline_code(text)
    found = _locate(text, 0, code)
    if found is None:
        return None
    candidate = _read(text, found, max_size, schema)
    if not candidate.usable:  # the usual reply's first candidate is the envelope
        candidate, skipped = _later_candidate(text, code, candidate, max_size, schema)
        for position in skipped:
            candidate.issues.add(
                "quoted-envelope",
                "this <dial> holds no speech act with content and a later one does: it is read as prose",
                text.count("\n", 0, position) + 1,
            )
        if candidate.elements and not candidate.usable:
            candidate.issues.add(
                "empty-envelope",
                f"the envelope gives nothing to show or do: its {len(candidate.elements)} elements are all empty",
                candidate.base + 1,
            )
    start, _, end, _ = candidate.found
    issues = candidate.issues
    candidates = 1
    if _START.search(text, end) is not None:
        later = _extra_envelopes(text, end, candidate.base + 1, start, issues, max_size, MAX_CANDIDATES - 1)
        candidates += later if candidate.usable else 0
    return Envelope(
        attributes=candidate.attributes,
        elements=candidate.elements,
        raw=candidate.raw,
        issues=issues.result() if issues.counts else (),
        prose=_prose_around(text, start, end),
        candidates=candidates,
    )


def envelope_candidates(text: str) -> int:
    """How many envelopes whose elements carry content ``text`` holds (``Envelope.candidates``; 0 or 1 when it
    holds at most one, which a single ``<dial`` start tag tells without parsing)."""
    first = _START.search(text)
    if first is None:
        return 0
    if _START.search(text, first.end()) is None:
        return 1
    try:
        envelope = parse(text, schema=False)
    except DialSizeError:
        return 1
    return 0 if envelope is None else envelope.candidates
