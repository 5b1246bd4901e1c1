"""Frozen records that a parsed DIAL envelope is made of.

One record type per speech act, with the spec's attributes as snake_case fields and the spec's defaults.
Fields the reference parser leaves out (``lang``, ``multi``, ``resume``, ``interval``, ``disabled``) are read too.
A ``payload`` is the decoded JSON value of the element's first ``<dial-payload>``; ``payload_text`` is that
payload's raw text (``None`` when the element has no payload), so a JSON ``null`` payload, a payload that is not
JSON and a missing payload can be told apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec


class ParseIssue(msgspec.Struct, frozen=True, kw_only=True):
    """Something the parser repaired, kept aside or could not read; ``line`` is 1-based in the whole reply."""

    code: str
    message: str
    line: int | None = None


class RootAttributes(msgspec.Struct, frozen=True, kw_only=True):
    """The attributes of the ``<dial>`` root; ``turn`` is ``None`` unless it is an unsigned integer."""

    version: str | None = None
    turn: int | None = None
    actor: str | None = None
    session: str | None = None


class Option(msgspec.Struct, frozen=True, kw_only=True):
    """One ``<dial-option>`` of a choice ask; ``value`` falls back to the label when absent."""

    value: str
    label: str = ""
    default: bool = False
    disabled: bool = False


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One ``<step>`` of a ``<dial-execute>``; ``command`` is the trimmed text content."""

    env: str = "shell"
    id: str | None = None
    label: str | None = None
    observe: str | None = None
    yields: tuple[str, ...] = ()
    command: str = ""


class _Act(msgspec.Struct, frozen=True, kw_only=True):
    """The base attributes every speech act carries."""

    id: str | None = None
    observe: str | None = None
    yields: tuple[str, ...] = ()
    addressed_to: str | None = None
    lang: str = "en"
    line: int | None = None


class _PayloadCarrier(_Act, frozen=True, kw_only=True):
    """An act that may carry a ``<dial-payload>``."""

    text: str | None = None
    payload: Any = None
    payload_text: str | None = None
    payload_type: str = "application/json"


class Inform(_PayloadCarrier, frozen=True, kw_only=True):
    """``<dial-inform>``: an assertion that expects no response."""

    type: str = "dial-inform"
    render: str = "prose"

    @property
    def has_content(self) -> bool:
        """Whether there is something to show: text or a payload."""
        return bool(self.text) or self.payload_text is not None


class AskElement(_Act, frozen=True, kw_only=True):
    """``<dial-ask>``: a question; ``timeout`` is in seconds (``None``: wait forever)."""

    type: str = "dial-ask"
    response_type: str = "text"
    timeout: float | None = None
    text: str | None = None
    options: tuple[Option, ...] = ()

    @property
    def has_content(self) -> bool:
        """Always: an ask without text or options still asks the person (they answer freely)."""
        return True


class Suggest(_PayloadCarrier, frozen=True, kw_only=True):
    """``<dial-suggest>``: a proposed action, with the agent's wording in ``text``."""

    type: str = "dial-suggest"
    render: str = "card-list"
    action: str | None = None
    multi: bool = False

    @property
    def has_content(self) -> bool:
        """Always: even an empty suggestion gets an outcome."""
        return True


class Execute(_Act, frozen=True, kw_only=True):
    """``<dial-execute>``: a graph of steps linked by observe/yield."""

    type: str = "dial-execute"
    steps: tuple[Step, ...] = ()

    @property
    def has_content(self) -> bool:
        """Whether there are steps."""
        return bool(self.steps)


class Acknowledge(_Act, frozen=True, kw_only=True):
    """``<dial-acknowledge>``: closes a loop; ``of`` names the acknowledged element."""

    type: str = "dial-acknowledge"
    of: str | None = None
    text: str | None = None

    @property
    def has_content(self) -> bool:
        """Whether there is text to show."""
        return bool(self.text)


class Declare(_PayloadCarrier, frozen=True, kw_only=True):
    """``<dial-declare>``: a named fact; the body may be a payload or bare JSON text (kept in ``text``)."""

    type: str = "dial-declare"
    context_key: str | None = None

    @property
    def has_content(self) -> bool:
        """Whether it names a fact (a ``context-key``), or has a body a suggestion before it may use."""
        return self.context_key is not None or bool(self.text) or self.payload_text is not None


class Delegate(_PayloadCarrier, frozen=True, kw_only=True):
    """``<dial-delegate>``: a hand-off to another actor; the payload is the one inside ``<dial-context>``."""

    type: str = "dial-delegate"
    to: str | None = None
    intent: str | None = None
    resume: bool = False

    @property
    def has_content(self) -> bool:
        """Whether there is a target, text or a payload to hand off."""
        return bool(self.to or self.text) or self.payload_text is not None


class Phatic(_Act, frozen=True, kw_only=True):
    """``<dial-phatic>``: a channel signal such as ``typing`` or ``session-complete``."""

    type: str = "dial-phatic"
    signal: str | None = None
    interval: float | None = None

    @property
    def has_content(self) -> bool:
        """Whether there is a signal."""
        return bool(self.signal)


Element = Inform | AskElement | Suggest | Execute | Acknowledge | Declare | Delegate | Phatic


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed ``<dial>`` envelope: root attributes, speech acts in document order, the raw text, repairs, and
    the reply's prose (its text outside the envelope, ends trimmed: what :func:`~dial_runtime.extract_prose`
    returns), and ``candidates``: how many envelopes whose elements carry content the reply holds, this one
    included (more than one: the reply is ambiguous, an example of the format beside the real envelope, say)."""

    attributes: RootAttributes = RootAttributes()
    elements: tuple[Element, ...] = ()
    raw: str = ""
    issues: tuple[ParseIssue, ...] = ()
    prose: str = ""
    candidates: int = 1

    @property
    def usable(self) -> bool:
        """Whether some element carries content (see each record's ``has_content``); ``False`` for an envelope
        the runtime has nothing to show or do for, such as one of empty informs, which it refuses."""
        return carries_content(self.elements)


def carries_content(elements: Iterable[Element]) -> bool:
    """Whether some element carries content (see each record's ``has_content``).

    A loop, not ``any()`` over a generator: the generator costs three times the instructions, about 1% of a
    benchmark turn, which asks this of every reply (measured side by side)."""
    for element in elements:  # noqa: SIM110
        if element.has_content:
            return True
    return False


def is_json_type(media_type: str | None) -> bool:
    """Whether a ``dial-payload`` of this ``type`` holds JSON (absent, ``application/json`` or ``*/*+json``)."""
    if not media_type:
        return True
    base = media_type.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")
