"""The options of every lxml parser that reads XML from outside: one place, so no reader can miss one.

:data:`SAFE_OPTIONS` is what keeps a hostile document harmless: no entity expansion, no DTD loading or validation,
no network, libxml2's size limits kept. :data:`HARDENED_OPTIONS` adds how an envelope is read: comments and
processing instructions dropped, CDATA sections read as text, ``xml:id`` not indexed.
"""

from __future__ import annotations

from typing import Final, TypedDict

from lxml import etree

__all__ = ["HARDENED_OPTIONS", "SAFE_OPTIONS", "HardenedOptions", "SafeOptions", "hardened_parser"]


class SafeOptions(TypedDict):
    """The keyword options of lxml's parsers that :data:`SAFE_OPTIONS` sets."""

    resolve_entities: bool
    no_network: bool
    load_dtd: bool
    dtd_validation: bool
    huge_tree: bool


class HardenedOptions(SafeOptions):
    """The keyword options of lxml's parsers that :data:`HARDENED_OPTIONS` sets."""

    remove_comments: bool
    remove_pis: bool
    strip_cdata: bool
    collect_ids: bool


SAFE_OPTIONS: Final[SafeOptions] = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "dtd_validation": False,
    "huge_tree": False,
}

#: The options of every parser that reads an envelope.
HARDENED_OPTIONS: Final[HardenedOptions] = {
    **SAFE_OPTIONS,
    "remove_comments": True,
    "remove_pis": True,
    "strip_cdata": True,
    "collect_ids": False,
}


def hardened_parser(*, recover: bool = False) -> etree.XMLParser:
    """A new lxml parser with :data:`HARDENED_OPTIONS`, recovering from malformed input or not."""
    return etree.XMLParser(recover=recover, **HARDENED_OPTIONS)
