"""Read an agent's reply while it streams in, handing out each speech act as soon as it is complete.

:class:`StreamParser` finds the envelope's start tag in the text received so far, then feeds the envelope to
libxml2's pull parser (hardened like :func:`~dial_runtime.language.parser.parse`: no entity expansion, no DTD,
no network) and builds the record of every top-level speech act whose end tag has arrived. It is an early view
only: :meth:`StreamParser.close` parses the whole reply with :func:`~dial_runtime.language.parser.parse`, which
stays the authority (repairs, issues, the schema check, the size limit). When the streamed envelope is not
well-formed, or grows past the size limit, the early view stops and the rest comes from that final parse, so a
caller that handled the first ``n`` streamed elements goes on with element ``n`` of the final envelope.
"""

from __future__ import annotations

from typing import Final

from lxml import etree

from dial_runtime.language.parser import (
    _BUILDERS,
    _START,
    DEFAULT_MAX_SIZE,
    HARDENED_OPTIONS,
    _find_start,
    _Issues,
    _locate,
    parse,
)
from dial_runtime.language.records import Element, Envelope

__all__ = ["StreamParser"]

# How far back a new chunk's search for the start tag begins, so a "<dial" split across chunks is found.
_OVERLAP: Final = len("<dial ")


class StreamParser:
    """Feed a streamed reply chunk by chunk; :meth:`feed` returns the speech acts completed by each chunk."""

    def __init__(self, *, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.max_size = max_size
        self._chunks: list[str] = []
        self._head = ""
        self._scan_from = 0
        self._pull: etree.XMLPullParser | None = None
        self._root: etree._Element | None = None
        self._base = 0
        self._size = 0
        self._stopped = False
        self.prose_before: str | None = None

    @property
    def text(self) -> str:
        """Everything received so far."""
        return "".join(self._chunks)

    @property
    def started(self) -> bool:
        """Whether the envelope's start tag has arrived (``prose_before`` is then the prose before it)."""
        return self.prose_before is not None

    def feed(self, chunk: str) -> list[Element]:
        """Take the next chunk; return the top-level speech acts whose end tag it completed, in order."""
        self._chunks.append(chunk)
        if self._stopped:
            return []
        if self._pull is None:
            self._head += chunk
            return self._look_for_start()
        return self._push(chunk)

    def prose_after(self) -> str:
        """The prose after the envelope's end tag, trimmed (empty while the envelope is open)."""
        found = _locate(self.text, 0)
        if found is None or not found[2]:
            return ""
        return self.text[found[1] :].strip()

    def close(self) -> Envelope | None:
        """Parse the whole reply (raises ``DialSizeError`` when the envelope is over the limit)."""
        return parse(self.text, max_size=self.max_size)

    def _look_for_start(self) -> list[Element]:
        head = self._head
        found = _find_start(head, self._scan_from)
        if found is None:
            pending = _START.search(head, self._scan_from)
            self._scan_from = pending.start() if pending else max(0, len(head) - _OVERLAP)
            return []
        start, _, _ = found
        self.prose_before = head[:start]
        self._base = head.count("\n", 0, start)
        self._pull = etree.XMLPullParser(events=("end",), **HARDENED_OPTIONS)
        self._head = ""
        return self._push(head[start:])

    def _push(self, text: str) -> list[Element]:
        assert self._pull is not None
        self._size += len(text.encode("utf-8", "surrogatepass"))
        if self._size > self.max_size:
            self._stopped = True
            return []
        try:
            self._pull.feed(text)
        except etree.XMLSyntaxError:
            self._stopped = True
        completed: list[Element] = []
        issues = _Issues()
        for _, element in self._pull.read_events():
            if not isinstance(element, etree._Element):
                continue
            parent = element.getparent()
            if parent is None:
                self._stopped = True
                break
            if parent.getparent() is not None:
                continue
            builder = _BUILDERS.get(element.tag) if isinstance(element.tag, str) else None
            if builder is not None:
                completed.append(builder(element, issues, self._base))
        return completed
