"""Outcomes and the DIAL envelopes that report them to the agent.

:func:`outcome_reply` writes the reference runtime's wire format (one ``dial-acknowledge`` and one
``dial-declare context-key="outcome:ID"`` per outcome, under a bare ``<dial>``), but always well-formed, whatever
the strings hold:

- texts and ids are XML-escaped; tabs, newlines and carriage returns become character references;
- a character XML 1.0 cannot hold (a C0 control other than tab, newline and carriage return, such as ``\x1b`` of
  an ANSI colour code or ``\x00``; U+FFFE and U+FFFF; a lone surrogate) is written as the visible escape
  ``\u001b`` (a backslash, ``u`` and four lowercase hex digits) in texts and ids. Inside the JSON body the
  same escape is JSON's own, so the agent's JSON decoder gives back the exact string;
- ``<``, ``>`` and ``&`` inside the JSON body are written as JSON escapes.

:func:`to_json_ready` turns any value into plain JSON data, bounded in depth and size (see its docstring).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import msgspec

from ..statemachines.suggestion import OutcomeStatus

STATUSES = ("done", "failed", "invalid", "dismissed", "superseded", "handed-off")

_ACKNOWLEDGEMENTS = {
    "done": "Done: {subject}.",
    "failed": "Couldn't do it: {subject}.",
    "invalid": "Not proposed to the user — the payload for {action} is invalid.",
    "dismissed": "The user dismissed: {subject}.",
    "superseded": "The user moved on without deciding: {subject}.",
    "handed-off": "Passed to the user in its own panel: {subject}.",
}

# Escapes as (character, replacement) pairs, "&" first; a chain of str.replace is cheaper than str.translate for
# the short, mostly clean strings written here (a character that is absent costs one scan and no copy).
_TEXT_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("\r", "&#13;"))
_ATTRIBUTE_ESCAPES = (*_TEXT_ESCAPES, ('"', "&quot;"), ("\t", "&#9;"), ("\n", "&#10;"))
_JSON_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))
# What XML 1.0 cannot hold. In a JSON body only U+FFFE, U+FFFF and surrogates can be found (the encoder escapes
# controls), each inside a JSON string, where the visible escape is JSON's own.
_NOT_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _refuse(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


_COMPACT_JSON = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_refuse, check_circular=False
)


def _visible(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _replaced(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    for character, replacement in escapes:
        if character in text:
            text = text.replace(character, replacement)
    if not text.isprintable() and _NOT_XML.search(text) is not None:  # all it matches is unprintable
        text = _NOT_XML.sub(_visible, text)
    return text


def escape_text(text: str) -> str:
    """Escape text content so an XML parser gives back exactly ``text`` (carriage returns included).

    A character XML cannot hold is written as a visible ``\\uXXXX`` escape instead (see the module docstring).
    """
    return _replaced(text, _TEXT_ESCAPES)


def escape_attribute(value: str) -> str:
    """Escape a double-quoted attribute value so it survives attribute-value normalisation unchanged.

    A character XML cannot hold is written as a visible ``\\uXXXX`` escape instead (see the module docstring).
    """
    return _replaced(value, _ATTRIBUTE_ESCAPES)


def _compact_encoder() -> Callable[[Any, int], Iterable[str]]:
    """The C encoder that ``_COMPACT_JSON.encode`` builds on every call, built once: the same JSON text, and its
    building took two fifths of the instructions spent encoding an outcome's fact. Without the C accelerator,
    the encoder's own chunks."""
    try:
        from _json import encode_basestring, make_encoder
    except ImportError:  # pragma: no cover (an interpreter without the accelerator)
        return lambda value, _level: _COMPACT_JSON.iterencode(value)
    return make_encoder(None, _refuse, encode_basestring, None, ":", ",", False, False, False)  # as iterencode


_ENCODE_COMPACT: Final = _compact_encoder()


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text; values JSON cannot hold are written as in :func:`to_json_ready`."""
    try:
        return "".join(_ENCODE_COMPACT(value, 0))
    except (TypeError, ValueError, RecursionError):
        return "".join(_ENCODE_COMPACT(to_json_ready(value), 0))


MAX_DEPTH: Final = 32
"""Containers :func:`to_json_ready` descends into, one inside another; a deeper one is replaced by a marker."""

MAX_TEXT: Final = 65_536
"""Characters :func:`to_json_ready` keeps of one string (and of one value written with ``str()``)."""

MAX_TOTAL_TEXT: Final = 1_048_576
"""Characters of text :func:`to_json_ready` keeps in all, keys included."""

MAX_ITEMS: Final = 100_000
"""Values (containers, their items, keys not counted) :func:`to_json_ready` keeps in all."""

_INT_DIGITS: Final = 4_300  # the digits Python converts to text by default (sys.get_int_max_str_digits)
_INT_BITS: Final = 14_300  # an integer of more bits has more than 4,300 digits
_SURROGATES: Final = re.compile("[\ud800-\udfff]")
_SHORT: Final = 256  # an ASCII string of at most this many characters is within every limit as it is
_FLAT_ITEMS: Final = 64  # entries of a dict checked for the copy-only path


class _Budget:
    """What one :func:`to_json_ready` call may still produce, and the containers holding the current value."""

    __slots__ = ("items", "path", "text")

    def __init__(self) -> None:
        self.items = MAX_ITEMS
        self.text = MAX_TOTAL_TEXT
        self.path: set[int] = set()


def to_json_ready(value: Any) -> Any:
    """``value`` as plain JSON data that ``json.dumps(..., allow_nan=False)`` and msgspec always encode.

    Never raises (but for ``BaseException`` such as ``KeyboardInterrupt``), and the result is bounded:

    - ``None``, ``bool``, ``str``, ``int`` and finite ``float`` stay (subclasses become the base type);
      ``nan``, ``inf`` and ``-inf`` become those strings; a lone surrogate in a string becomes U+FFFD;
    - mappings become objects with ``str()`` keys; lists, tuples, sets and frozensets become arrays;
    - anything else becomes ``str(value)`` (``repr`` if that raises, else a marker naming the type).

    Where a limit cuts, a marker in brackets says what was cut: a string over :data:`MAX_TEXT` characters
    (``"...… [cut: 123 more characters]"``), containers nested deeper than :data:`MAX_DEPTH`, a container inside
    itself (``"[cut: refers to itself]"``), an integer of more than 4,300 digits, and everything past
    :data:`MAX_ITEMS` values or :data:`MAX_TOTAL_TEXT` characters in all (an array ends in
    ``"[cut: N more items]"``, an object gets the key ``"…"``).
    """
    kind = type(value)
    if kind is str:
        return _text(value, _Budget()) if len(value) > _SHORT or not value.isascii() else value
    if value is None or kind is bool or (kind is int and -(2**63) <= value < 2**64):
        return value
    if kind is float and math.isfinite(value):
        return value
    if kind is dict and _flat(value):
        return dict(value)
    return _convert(value, _Budget(), 0)


def _flat(value: dict[Any, Any]) -> bool:
    """Whether ``value`` is plain JSON data within every limit already: up to :data:`_FLAT_ITEMS` short ASCII
    keys, each holding ``None``, a ``bool``, a 64-bit ``int``, a finite ``float`` or a short ASCII ``str``.

    Most payloads and results are such a dict: copying it takes a sixth of the instructions the general
    conversion spends on it."""
    if len(value) > _FLAT_ITEMS:
        return False
    for key, item in value.items():
        if type(key) is not str or len(key) > _SHORT or not key.isascii():
            return False
        kind = type(item)
        if kind is str:
            if len(item) > _SHORT or not item.isascii():
                return False
        elif kind is int:
            if not -(2**63) <= item < 2**64:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is not None and kind is not bool:
            return False
    return True


def _convert(value: Any, budget: _Budget, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value if value is None else bool(value)
    if isinstance(value, str):
        return _text(str.__str__(value), budget)
    if isinstance(value, int):
        number = int(value)
        if number.bit_length() <= _INT_BITS:  # more bits would be more digits than Python converts
            try:
                if len(str(number)) <= _INT_DIGITS:
                    return number
            except ValueError:  # the interpreter's digit limit is lower
                pass
        return f"[cut: an integer of {number.bit_length()} bits]"
    if isinstance(value, float):
        real = float(value)
        return real if math.isfinite(real) else str(real)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        if depth >= MAX_DEPTH:
            return f"[cut: nested deeper than {MAX_DEPTH} levels]"
        ident = id(value)
        if ident in budget.path:
            return "[cut: refers to itself]"
        budget.path.add(ident)
        try:
            if isinstance(value, Mapping):
                return _object(value, budget, depth + 1)
            return _array(value, budget, depth + 1)
        except Exception as error:  # a user-defined container whose iteration raises
            return _unprintable(value, error)
        finally:
            budget.path.discard(ident)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value[:MAX_TEXT])
        return _text(str(data), budget, len(value) - len(data))
    return _text(_str(value), budget)


def _object(value: Mapping[Any, Any], budget: _Budget, depth: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for count, (key, item) in enumerate(value.items()):
        if budget.items <= 0 or budget.text <= 0:
            result["…"] = f"[cut: {len(value) - count} more entries]"
            break
        budget.items -= 1
        name = key if type(key) is str else _convert(key, budget, depth)
        result[_text(name if isinstance(name, str) else str(name), budget)] = _convert(item, budget, depth)
    return result


def _array(value: Iterable[Any], budget: _Budget, depth: int) -> list[Any]:
    result: list[Any] = []
    for item in value:
        if budget.items <= 0 or budget.text <= 0:
            result.append(f"[cut: {len(value) - len(result)} more items]")  # type: ignore[arg-type]
            break
        budget.items -= 1
        result.append(_convert(item, budget, depth))
    return result


def _text(text: str, budget: _Budget, cut: int = 0) -> str:
    """``text`` within the limits (with a marker if cut), a lone surrogate replaced by U+FFFD."""
    keep = min(len(text), MAX_TEXT, max(budget.text, 0))
    cut += len(text) - keep
    budget.text -= keep
    if cut:
        text = f"{text[:keep]}… [cut: {cut} more characters]"
    if not text.isascii() and _SURROGATES.search(text) is not None:
        text = _SURROGATES.sub("\ufffd", text)
    return text


def _str(value: Any) -> str:
    """``str(value)``, else ``repr(value)``, else a marker: a value's own methods may raise anything."""
    try:
        return str(value)
    except Exception as error:
        try:
            return repr(value)
        except Exception:
            return _unprintable(value, error)


def _unprintable(value: Any, error: Exception) -> str:
    return f"[unprintable {type(value).__name__}: {type(error).__name__}]"


#: Makes a default that is written even when it holds it: ``NoneType()`` is ``None``, made in C.
_NONE = type(None)


class OutcomeFields(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of an outcome, declared once: :class:`Outcome` has them, and so has the log's ``outcome`` event
    (:class:`~dial_runtime.runtime.events.OutcomeEvent`), which keeps them flat in its stored form."""

    id: str
    action: str
    status: OutcomeStatus
    # Defaults made by factories are written even when they hold them (the log's ``outcome`` omits defaults):
    # the stored form of these fields stays what it always was; a field added later is left out at its default.
    preview: str = msgspec.field(default_factory=str)
    result: Any = msgspec.field(default_factory=_NONE)
    error: str | None = msgspec.field(default_factory=_NONE)
    code: str | None = msgspec.field(default_factory=_NONE)
    field: str | None = msgspec.field(default_factory=_NONE)
    hint: str | None = msgspec.field(default_factory=_NONE)
    edited: bool = msgspec.field(default_factory=bool)
    expired: bool = msgspec.field(default_factory=bool)
    reconciled: bool = False


class Outcome(OutcomeFields, frozen=True, kw_only=True):
    """How one suggestion ended: exactly one per suggestion, reported to the agent."""

    def fact(self) -> dict[str, Any]:
        """The JSON fact declared to the agent: action, status, then only the fields that are present."""
        fact: dict[str, Any] = {"action": self.action, "status": self.status}
        if self.result is not None:
            fact["result"] = self.result
        if self.error is not None:
            fact["error"] = self.error
        if self.code is not None:
            fact["code"] = self.code
        if self.field is not None:
            fact["field"] = self.field
        if self.hint is not None:
            fact["hint"] = self.hint
        if self.edited:
            fact["edited"] = True
        if self.expired:
            fact["expired"] = True
        return fact

    def acknowledgement(self) -> str:
        """The short text of the ``dial-acknowledge`` that closes this outcome's loop."""
        template = _ACKNOWLEDGEMENTS.get(self.status)
        if template is None:
            raise ValueError(f"outcome_reply: unknown status '{self.status}'")
        return template.format(subject=self.preview or self.action, action=self.action)


def outcome_reply(outcomes: Iterable[Outcome]) -> str:
    """Write the DIAL envelope that tells the agent these outcomes (SPEC-NOTES §4.7's format, always well-formed).

    Raises ``ValueError("outcome_reply: unknown status 'weird'")`` when a status is not one of :data:`STATUSES`.
    """
    blocks = []
    for outcome in outcomes:
        acknowledgement = outcome.acknowledgement()
        ident = escape_attribute(outcome.id)
        status = outcome.status  # a word of STATUSES (its acknowledgement was found): nothing in it to escape
        body = _replaced(compact_json(outcome.fact()), _JSON_ESCAPES)
        blocks.append(
            f'  <dial-acknowledge of="{ident}" yield="{ident}:{status}">{escape_text(acknowledgement)}'
            "</dial-acknowledge>\n"
            f'  <dial-declare context-key="outcome:{ident}">\n'
            f'    <dial-payload type="application/json">{body}</dial-payload>\n'
            "  </dial-declare>"
        )
    return "<dial>\n" + "\n".join(blocks) + "\n</dial>"


def refusal_reply(reply_id: str, reason: str) -> str:
    """Tell the agent that its reply ``reply_id`` could not be used, and why, so it can send a usable one."""
    ident = escape_attribute(reply_id)
    return (
        "<dial>\n"
        f'  <dial-acknowledge of="{ident}" yield="{ident}:invalid">'
        f"{escape_text(f'Your reply could not be used: {reason}')}</dial-acknowledge>\n"
        "</dial>"
    )


def correction_reply(reply_id: str, reason: str) -> str:
    """Tell the agent that an acknowledgement of its reply ``reply_id`` contradicts what the runtime reported,
    and why: the person saw it marked as not confirmed."""
    ident = escape_attribute(reply_id)
    words = f"Your acknowledgement was shown as not confirmed: {reason}. Report only the outcomes you were sent."
    return (
        "<dial>\n"
        f'  <dial-acknowledge of="{ident}" yield="{ident}:unconfirmed">{escape_text(words)}</dial-acknowledge>\n'
        "</dial>"
    )


class Reported(msgspec.Struct, frozen=True, kw_only=True):
    """One outcome as a message to the agent reports it (:func:`outcome_reply`): the suggestion's ``id``, its
    ``status``, the acknowledgement's text and the declared fact as the JSON text written (``body``: compact, with
    ``<``, ``>`` and ``&`` as JSON escapes), which :meth:`fact` reads."""

    id: str
    status: str
    acknowledgement: str
    body: str

    def fact(self) -> dict[str, Any]:
        """The declared fact."""
        fact: dict[str, Any] = msgspec.json.decode(self.body)
        return fact


class Reports(msgspec.Struct, frozen=True, kw_only=True):
    """A message to the agent, read back: the outcomes it reports, the notices about the agent's own replies
    (:func:`refusal_reply`, :func:`correction_reply`: the text of each), and the rest (the domain's context and
    the person's words), as the agent would read it."""

    outcomes: tuple[Reported, ...] = ()
    notices: tuple[str, ...] = ()
    rest: str = ""


#: One report of an envelope :func:`outcome_reply`, :func:`refusal_reply` or :func:`correction_reply` wrote: an
#: acknowledge (the id it acknowledges, its yield, its text), and for an outcome the declare of its fact. Escaped
#: text holds no ``<`` and an escaped attribute no ``"``, so each group is exactly what was written.
_REPORT: Final = re.compile(
    r'  <dial-acknowledge of="([^"]*)" yield="([^"]*)">([^<]*)</dial-acknowledge>'
    r'(?:\n  <dial-declare context-key="outcome:([^"]*)">\n    <dial-payload type="application/json">(\{[^<]*)'
    r"</dial-payload>\n  </dial-declare>)?(\n</dial>|\n)"
)
_OPENING = "<dial>\n"
#: The escapes the writers use, undone in the order that keeps ``&amp;lt;`` the text ``&lt;``.
_UNESCAPES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#13;", "\r"), ("&#9;", "\t"), ("&#10;", "\n"))


def _unescaped(text: str) -> str:
    if "&" not in text:
        return text
    for escape, character in _UNESCAPES:
        if escape in text:
            text = text.replace(escape, character)
    return text.replace("&amp;", "&")


def read_reports(message: str) -> Reports:
    """Read back what :func:`outcome_reply`, :func:`refusal_reply` and :func:`correction_reply` wrote at the start
    of a message (each envelope a part of its own, parts apart by a blank line), for a codec that tells a model
    the same things in its own channel (a tool result per outcome). Only envelopes in exactly those forms are
    read; anything else, from the first part that is not one, is the rest.

    The writers are this module's, so their output is read by its form (a pattern per report) rather than by an
    XML parser, at a fraction of the instructions, which a codec spends on every message
    (``bench_codecs.py``)."""
    if not message.startswith(_OPENING):
        return Reports(rest=message)
    outcomes: list[Reported] = []
    notices: list[str] = []
    at = 0
    while message.startswith(_OPENING, at):
        end = _read_block(message, at + len(_OPENING), outcomes, notices)
        if end < 0:
            break
        at = end + 2 if message.startswith("\n\n", end) else end
    return Reports(outcomes=tuple(outcomes), notices=tuple(notices), rest=message[at:])


def _read_block(message: str, at: int, outcomes: list[Reported], notices: list[str]) -> int:
    """Read the envelope whose reports start at ``at`` into ``outcomes`` and ``notices``; where it ends, or -1
    (and nothing read) when it is not one the writers wrote."""
    found: list[Reported] = []
    told: list[str] = []
    while True:
        report = _REPORT.match(message, at)
        if report is None:
            return -1
        of, yielded, text, declared, body, ending = report.groups()
        ident, _, status = yielded.rpartition(":")
        if ident != of or (declared is not None and declared != of):
            return -1
        if declared is None:
            told.append(_unescaped(text))
        else:
            found.append(Reported(id=_unescaped(of), status=status, acknowledgement=_unescaped(text), body=body))
        at = report.end()
        if ending != "\n":
            outcomes += found
            notices += told
            return at
