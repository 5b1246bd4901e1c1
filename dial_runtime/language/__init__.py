"""The DIAL language: the frozen records a reply's ``<dial>`` envelope is parsed into (``records``), the parsers
whole and streaming (``parser``, ``stream``), the schema check (``schema``) and the outcome replies written back to
the agent (``outcomes``). A name the top level exports too is the same object there."""

from __future__ import annotations

from .outcomes import Outcome, outcome_reply
from .parser import extract_prose, parse
from .records import (
    Acknowledge,
    AskElement,
    Declare,
    Delegate,
    Element,
    Envelope,
    Execute,
    Inform,
    Option,
    ParseIssue,
    Phatic,
    RootAttributes,
    Step,
    Suggest,
)
from .schema import SchemaIssue, validate
from .stream import StreamParser, TextDelta

__all__ = [
    "Acknowledge",
    "AskElement",
    "Declare",
    "Delegate",
    "Element",
    "Envelope",
    "Execute",
    "Inform",
    "Option",
    "Outcome",
    "ParseIssue",
    "Phatic",
    "RootAttributes",
    "SchemaIssue",
    "Step",
    "StreamParser",
    "Suggest",
    "TextDelta",
    "extract_prose",
    "outcome_reply",
    "parse",
    "validate",
]
