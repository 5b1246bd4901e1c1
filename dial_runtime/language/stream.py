"""Read an agent's reply while it streams in, handing out each speech act as soon as it is complete.

:class:`StreamParser` finds the envelope's start tag in the text received so far (by :func:`parse`'s rules: not
in inline code), then feeds the envelope to libxml2's pull parser (hardened like
:func:`~dial_runtime.language.parser.parse`) and builds the record of every top-level speech act whose end tag has
arrived. It is an early view only: :meth:`StreamParser.close` parses the whole reply with
:func:`~dial_runtime.language.parser.parse`, which stays the authority (repairs, issues, the schema check, which
of several ``<dial>`` is the envelope). Whatever the chunks, the elements :meth:`~StreamParser.feed` returned are
the first elements of the final envelope, in order: the early view stops (and the rest comes from the final
parse) when the streamed envelope is not well-formed, holds a ``<dial>`` or a namespace, ends without an element
that carries content, or grows past a limit. Elements that carry no content are held back until one that does
arrives, since an envelope of empty elements may turn out not to be the envelope.

**Text as it arrives**: :meth:`~StreamParser.text_deltas` returns the text that arrived since the last call, as
:class:`TextDelta` items: prose before the envelope (``element=-1``), prose after it (``element=-2``) and the body
of the dial-inform or dial-acknowledge at index ``element`` while it is still open. The deltas of one
``(act, element)`` concatenated equal, once :meth:`~StreamParser.close` has been called and its deltas read, the
final value: the element's ``text`` (``""`` for ``None``), or the prose before or after the envelope, trimmed
(with no envelope, ``element=-1`` holds the whole reply, trimmed). Leading and trailing whitespace is held back
until text follows it; an inform's body streams while it holds only character data and the five XML entities
(after a child element, CDATA, another reference or a carriage return the rest comes when the element is
complete). Should the final parse disagree with what was given (it cannot for a well-formed envelope), a delta
with ``replaces=True`` carries the whole final value.

**Limits**: the envelope may hold ``max_size`` bytes of UTF-8 (8 MiB by default, as :func:`parse`) and the whole
reply ``max_reply_size`` characters (16 Mi by default). Past either, the parser stops taking text in (memory
stays bounded), :attr:`~StreamParser.overflow` holds the :class:`~dial_runtime.errors.DialSizeError`, ``feed``
raises it once and returns ``[]`` afterwards, and :meth:`~StreamParser.close` raises it again: the reply is
unusable, as a whole one over the limit is.

Everything is linear in the size of the reply, whatever the chunking.
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec
from lxml import etree

from dial_runtime.errors import DialSizeError
from dial_runtime.language.parser import (
    _BUILDERS,
    _SURROGATE,
    CLOSING_FENCE,
    DEFAULT_MAX_REPLY_SIZE,
    DEFAULT_MAX_SIZE,
    HARDENED_OPTIONS,
    OPENING_FENCE,
    _find_end,
    _find_start,
    _inline_code,
    _Issues,
    envelope_bounds,
    parse,
    unfenced,
)
from dial_runtime.language.records import Element, Envelope

__all__ = ["StreamParser", "TextDelta"]

_PROSE_BEFORE: Final = -1
_PROSE_AFTER: Final = -2
#: What the first line after an envelope holds while it may still become a closing fence: backticks, then spaces.
_FENCE_LINE: Final = re.compile(r"`+[ \t]*")


TextAct = Literal["prose", "inform", "acknowledge"]
_TEXT_ACTS: Final[dict[str, TextAct]] = {"dial-inform": "inform", "dial-acknowledge": "acknowledge"}


class TextDelta(msgspec.Struct, frozen=True, kw_only=True):
    """Text that arrived: prose (``element`` -1 before the envelope, -2 after it) or an open inform's body."""

    text: str
    act: TextAct
    element: int
    replaces: bool = False


class _Pieces:
    """Text kept as it arrives, small pieces joined in groups: tiny chunks cost little more than their text."""

    __slots__ = ("joined", "recent")

    def __init__(self, first: str = "") -> None:
        self.joined: list[str] = [first] if first else []
        self.recent: list[str] = []

    def append(self, piece: str) -> None:
        self.recent.append(piece)
        if len(self.recent) >= 256:
            self.joined.append("".join(self.recent))
            self.recent = []

    def text(self) -> str:
        text = "".join((*self.joined, *self.recent))
        self.joined, self.recent = [text], []
        return text


class _Deltas:
    """Text deltas not read yet; consecutive ones of one text are merged, so unread deltas cost their text only."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[tuple[TextAct, int, _Pieces, bool]] = []

    def add(self, act: TextAct, element: int, text: str, *, replaces: bool = False) -> None:
        if self.items and not replaces:
            last_act, last_element, pieces, _ = self.items[-1]
            if last_act == act and last_element == element:
                pieces.append(text)
                return
        self.items.append((act, element, _Pieces(text), replaces))

    def take(self) -> list[TextDelta]:
        items, self.items = self.items, []
        return [
            TextDelta(text=pieces.text(), act=act, element=element, replaces=replaces)
            for act, element, pieces, replaces in items
        ]


class _Trimmed:
    """Passes text on with its leading whitespace dropped and trailing whitespace held until text follows."""

    __slots__ = ("given", "held", "started")

    def __init__(self) -> None:
        self.given = _Pieces()
        self.held = ""
        self.started = False

    def add(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        text = self.held + text
        kept = text.rstrip()
        self.held = text[len(kept) :]
        if kept:
            self.given.append(kept)
        return kept

    def text(self) -> str:
        return self.given.text()


# Inside an open inform: character data, a predefined entity, or something that stops the early text.
_CHARACTER_DATA: Final = re.compile(r"[^<&\r]+")
_ENTITY: Final = re.compile(r"&(amp|lt|gt|quot|apos);")
_ENTITIES: Final = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
# Between acts: the next tag, comment, processing instruction or CDATA section, complete.
_MARKUP: Final = re.compile(
    r"<!--.*?-->|<\?.*?\?>|<!\[CDATA\[.*?\]\]>|</?([^\s/>\"'<=&!?]+)(?:\"[^\"]*\"|'[^']*'|[^>\"'])*?(/?)>", re.S
)
_TERMINATORS: Final = (("<!--", "-->"), ("<?", "?>"), ("<![CDATA[", "]]>"), ("<!", ">"))


class _OpenActs:
    """Follows the envelope's raw text to stream the body of its open inform or acknowledge.

    libxml2 hands character data over only when markup follows it, so this tracks the depth of tags in the raw
    text itself and gives an act's own character data while it has seen nothing in it but text and the five XML
    entities. Incomplete markup is kept until its terminator arrives; each character is read once or twice.
    """

    __slots__ = ("act", "blocked", "depth", "done", "held", "index", "terminator", "trimmed")

    def __init__(self) -> None:
        self.held: list[str] = []
        self.terminator = ""
        self.depth = 0
        self.index = 0
        self.act: TextAct | None = None
        self.blocked = False
        self.done = False
        self.trimmed: dict[int, _Trimmed] = {}

    def feed(self, text: str, out: _Deltas) -> None:
        if self.done or not text:
            return
        if self.held:
            # The terminator may begin in the last two parts held (a terminator is at most three characters).
            if self.terminator not in "".join(self.held[-2:])[-3:] + text:
                self.held.append(text)  # still incomplete: no need to look again
                return
            text, self.held = "".join((*self.held, text)), []
        pos, length = 0, len(text)
        while pos < length and not self.done:
            if self.act is not None and self.depth == 1 and not self.blocked:
                data = _CHARACTER_DATA.match(text, pos)
                if data is not None:
                    self.give(data.group(), out)
                    pos = data.end()
                    continue
                if text[pos] == "&":
                    entity = _ENTITY.match(text, pos)
                    if entity is not None:
                        self.give(_ENTITIES[entity.group(1)], out)
                        pos = entity.end()
                        continue
                    if length - pos < 8 and ";" not in text[pos:]:
                        self.held, self.terminator = [text[pos:]], ";"
                        return
                    self.blocked = True
                    continue
                if text[pos] == "\r":
                    self.blocked = True
                    continue
            lt = text.find("<", pos)
            if lt == -1:
                return
            markup = _MARKUP.match(text, lt)
            if markup is None:
                self.held = [text[lt:]]
                self.terminator = next((end for start, end in _TERMINATORS if text.startswith(start, lt)), ">")
                return
            pos = markup.end()
            self.tag(markup)

    def tag(self, markup: re.Match[str]) -> None:
        name, empty = markup.group(1), markup.group(2)
        if name is None:  # a comment, processing instruction or CDATA section
            if self.act is not None and markup.group().startswith("<![CDATA["):
                self.blocked = True
            return
        if "xmlns" in markup.group():  # a namespace changes what the tags are: the final parse will tell
            self.done = True
            return
        if markup.group().startswith("</"):
            self.depth -= 1
            if self.depth == 0:
                self.act = None
            self.done = self.depth < 0  # the root's end tag
            return
        if self.depth == 0:
            if name in _BUILDERS:
                self.act = None if empty else _TEXT_ACTS.get(name)
                self.blocked = False
                self.index += 1
        elif self.act is not None:
            self.blocked = True
        if not empty:
            self.depth += 1

    def give(self, text: str, out: _Deltas) -> None:
        act = self.act
        assert act is not None
        index = self.index - 1
        given = self.trimmed.setdefault(index, _Trimmed()).add(text)
        if given:
            out.add(act, index, given)


class StreamParser:
    """Feed a streamed reply chunk by chunk; :meth:`feed` returns the speech acts completed by each chunk."""

    def __init__(self, *, max_size: int = DEFAULT_MAX_SIZE, max_reply_size: int = DEFAULT_MAX_REPLY_SIZE) -> None:
        self.max_size = max_size
        self.max_reply_size = max_reply_size
        #: The limit the stream passed (see the module docstring), else ``None``.
        self.overflow: DialSizeError | None = None
        #: The prose before the envelope once its start tag has arrived, else ``None``.
        self.prose_before: str | None = None
        self._chunks = _Pieces()
        self._text: str | None = ""
        self._reply_size = 0
        # Before the envelope: the text from where a start tag may still begin (absolute offset _pending_at), and
        # whether it holds a backtick (then the current line's inline code decides, once the line is complete).
        self._pending: list[str] = []
        self._pending_at = 0
        self._pending_size = 0
        self._scanned_size = 0
        self._ticks = False
        self._envelope: list[str] = []
        self._tag_end = 0
        self._pull: etree.XMLPullParser | None = None
        self._base = 0
        self._size = 0
        self._stopped = False
        self._ended = False
        self._held: list[Element] = []
        self._built = 0
        self._released = 0
        self._deltas = _Deltas()
        self._before = _Trimmed()
        self._after = _Trimmed()
        # The prose after the envelope, held while it may still be the fence that closes a fenced envelope.
        self._after_head: str | None = ""
        self._acts = _OpenActs()
        self._closed = False

    @property
    def text(self) -> str:
        """Everything received so far (up to the reply limit, when it was passed)."""
        if self._text is None:
            self._text = self._chunks.text()
        return self._text

    @property
    def started(self) -> bool:
        """Whether the envelope's start tag has arrived (``prose_before`` is then the prose before it)."""
        return self.prose_before is not None

    def feed(self, chunk: str) -> list[Element]:
        """Take the next chunk; return the top-level speech acts whose end tag it completed, in order.

        Raises :class:`~dial_runtime.errors.DialSizeError` once, for the chunk that passes a limit (see the
        module docstring); later chunks are ignored.
        """
        if self.overflow is not None:
            return []
        size = len(chunk) if chunk.isascii() else len(chunk.encode("utf-8", "surrogatepass"))
        if self._reply_size + size > self.max_reply_size:
            self.overflow = DialSizeError(self._reply_size + size, self.max_reply_size, what="reply")
            self._stopped = True
            raise self.overflow
        self._reply_size += size
        self._chunks.append(chunk)
        self._text = None
        if self._ended:
            self._give_after(chunk)
            return []
        if self._pull is None:
            completed = self._look_for_start(chunk)
        elif self._stopped:
            return []
        else:
            completed = self._push(chunk, 0)
        if self.overflow is not None:
            raise self.overflow
        return completed

    def text_deltas(self) -> list[TextDelta]:
        """The text that arrived since the last call (see the module docstring)."""
        return self._deltas.take()

    def prose_after(self) -> str:
        """The prose after the envelope :func:`parse` reads, without a fence that closes it, trimmed (empty while
        the envelope is open)."""
        text = self.text
        found = envelope_bounds(text)
        return "" if found is None or not found[2] else unfenced("", text[found[1] :])[1].strip()

    def close(self) -> Envelope | None:
        """Parse the whole reply; raises ``DialSizeError`` when the envelope or the reply is over its limit.

        Afterwards :meth:`text_deltas` completes every text to its final value.
        """
        if self.overflow is not None:
            raise self.overflow
        envelope = parse(self.text, max_size=self.max_size, max_reply_size=self.max_reply_size)
        if not self._closed:
            self._closed = True
            self._complete(envelope)
        return envelope

    # ------------------------------------------------------------------------------------------ before

    def _look_for_start(self, chunk: str) -> list[Element]:
        if not self._pending and "<" not in chunk and "`" not in chunk:
            self._pending_at += len(chunk)
            self._prose(self._before, chunk, _PROSE_BEFORE)
            return []
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        self._ticks = self._ticks or "`" in chunk
        if self._ticks:
            if "\n" not in chunk and self._pending_size < 2 * self._scanned_size:
                return []  # looked at again once the line ends or has doubled: linear time
        elif "<" not in chunk and ">" not in chunk:
            return []  # a start tag kept pending cannot complete without a '>'
        head = "".join(self._pending)
        self._scanned_size = len(head)
        found = _find_start(head, 0, _inline_code(head))
        if found is not None:
            start = found[0]
            line_start = head.rfind("\n", 0, start) + 1
            # After a backtick on its line, a start tag counts once the line is complete (a span may close).
            if head.find("`", line_start, start) == -1 or head.find("\n", start) != -1:
                return self._start(head, start, found[1])
        self._trim(head)
        return []

    def _trim(self, head: str) -> None:
        """Keep only the text where a start tag may still begin, passing what comes before on as prose."""
        keep = 0
        if self._ticks:
            keep = head.rfind("\n") + 1
            opening = OPENING_FENCE.search(head, 0, keep)
            if opening is not None:  # a fence may open right before the envelope: held until that is known
                keep = opening.start() + (head[opening.start()] == "\n")
            self._ticks = "`" in head[keep:]
        if not self._ticks:
            lt = head.rfind("<", keep)
            keep = lt if lt != -1 and _may_start(head, lt) else len(head)
        self._pending = [head[keep:]] if keep < len(head) else []
        self._pending_size = self._scanned_size = len(head) - keep
        self._pending_at += keep
        self._prose(self._before, head[:keep], _PROSE_BEFORE)

    def _start(self, head: str, start: int, tag_end: int) -> list[Element]:
        self._prose(self._before, unfenced(head[:start], "")[0], _PROSE_BEFORE)
        absolute = self._pending_at + start
        self._pending = []
        before = self.text[:absolute]
        self.prose_before = unfenced(before, "")[0]
        self._base = before.count("\n")
        self._tag_end = tag_end - start
        if head[start:tag_end].endswith("/>"):  # an empty envelope: nothing after its tag is inside it
            self._acts.done = True
        self._pull = etree.XMLPullParser(events=("start", "end"), **HARDENED_OPTIONS)
        return self._push(head[start:], self._tag_end)

    def _prose(self, trimmed: _Trimmed, text: str, element: int) -> None:
        given = trimmed.add(text) if text else ""
        if given:
            self._deltas.add("prose", element, given)

    # ------------------------------------------------------------------------------------------ envelope

    def _push(self, text: str, content: int) -> list[Element]:
        """Feed envelope text whose root content starts at ``content``; the speech acts it completed."""
        pull = self._pull
        assert pull is not None
        data = text.encode() if text.isascii() else _SURROGATE.sub("\ufffd", text).encode()
        self._size += len(data)
        if self._size > self.max_size:
            self._stopped = True
            self.overflow = DialSizeError(self._size, self.max_size)
            return []
        self._envelope.append(text)
        self._acts.feed(text[content:], self._deltas)
        try:
            pull.feed(data)
        except etree.XMLSyntaxError:
            self._stopped = True
        completed: list[Element] = []
        issues = _Issues(many_attributes=True)  # the envelope is not seen whole: read by name
        for event, element in pull.read_events():
            if not isinstance(element, etree._Element) or not isinstance(element.tag, str):
                continue
            parent = element.getparent()
            if event == "start":
                if element.tag[:1] == "{" or (parent is not None and element.tag == "dial"):
                    self._stop()  # the final parse reads these otherwise: namespaces dropped, another candidate
                    break
                continue
            if parent is None:
                self._end_of_envelope()
                break
            if parent.getparent() is not None:
                continue
            builder = _BUILDERS.get(element.tag)
            if builder is None:
                continue
            record = builder(element, issues, self._base)
            self._built += 1
            self._held.append(record)
            if self._released or record.has_content:
                for offset, held in enumerate(self._held):
                    self._finish_element(held, self._released + offset)
                completed.extend(self._held)
                self._released += len(self._held)
                self._held = []
        return completed

    def _stop(self) -> None:
        self._stopped = True
        self._held = []

    def _end_of_envelope(self) -> None:
        """The root's end tag arrived: what follows it is prose (unless the envelope turned out empty)."""
        self._stop()
        if not self._released:
            return  # only elements without content: the final parse may choose another envelope
        raw = "".join(self._envelope)
        end, _ = _find_end(raw, self._tag_end)
        self._ended = True
        self._give_after(raw[end:])

    def _give_after(self, text: str) -> None:
        """Pass on prose after the envelope, once its first line is known not to be, or to be, a closing fence
        (which is left out)."""
        held = self._after_head
        if held is None:
            self._prose(self._after, text, _PROSE_AFTER)
            return
        held += text
        line = held.lstrip()
        if not line or (line.startswith("`") and "\n" not in line and _FENCE_LINE.fullmatch(line)):
            self._after_head = held  # nothing yet, or what may still be a fence
            return
        self._after_head = None
        closing = CLOSING_FENCE.match(held)
        self._prose(self._after, held if closing is None else held[closing.end() :], _PROSE_AFTER)

    # ------------------------------------------------------------------------------------------ completing

    def _finish_element(self, element: Element, index: int) -> None:
        act = _TEXT_ACTS.get(element.type)
        if act is not None:
            trimmed = self._acts.trimmed.setdefault(index, _Trimmed())
            self._finish(trimmed, getattr(element, "text", None) or "", act, index)

    def _complete(self, envelope: Envelope | None) -> None:
        """Give the rest of every text, so each concatenation equals its final value."""
        text = self.text
        found = envelope_bounds(text) if envelope is not None else None
        if envelope is None or found is None:
            self._finish(self._before, text.strip(), "prose", _PROSE_BEFORE)
            return
        start, end, _ = found
        before, after = unfenced(text[:start], text[end:])
        self._finish(self._before, before.strip(), "prose", _PROSE_BEFORE)
        for index, element in enumerate(envelope.elements):
            self._finish_element(element, index)
        self._finish(self._after, after.strip(), "prose", _PROSE_AFTER)

    def _finish(self, trimmed: _Trimmed, final: str, act: TextAct, element: int) -> None:
        given = trimmed.text()
        if final.startswith(given):
            rest = final[len(given) :]
            if rest:
                trimmed.given.append(rest)
                self._deltas.add(act, element, rest)
        else:
            trimmed.given = _Pieces(final)
            self._deltas.add(act, element, final, replaces=True)
        trimmed.started, trimmed.held = True, ""


def _may_start(text: str, lt: int) -> bool:
    """Whether a start tag may still begin at the ``<`` at ``lt``, the last one of ``text``."""
    rest = text[lt : lt + 6]
    return "<dial".startswith(rest) or (rest.startswith("<dial") and rest[5] in " \t\r\n/>")
