"""Hypothesis strategies shared by the tests."""

from __future__ import annotations

from hypothesis import strategies as st

from dial_runtime import Outcome
from dial_runtime.language.outcomes import STATUSES

#: Characters XML 1.0 allows (tab, newline and carriage return included), minus surrogates.
xml_text = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",),
        blacklist_characters=[chr(c) for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)] + ["\ufffe", "\uffff"],
    ),
    max_size=40,
)

#: Ids are one token of a ``yield`` list: non-empty XML text with no whitespace.
ids = xml_text.filter(lambda text: bool(text) and not any(char.isspace() for char in text))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | xml_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(xml_text, children, max_size=3),
    max_leaves=8,
)


def outcomes_of(
    text: st.SearchStrategy[str], ident: st.SearchStrategy[str], result: st.SearchStrategy[object]
) -> st.SearchStrategy[Outcome]:
    """Outcomes whose strings come from ``text`` (the id from ``ident``) and whose result from ``result``."""
    return st.builds(
        Outcome,
        id=ident,
        action=text,
        status=st.sampled_from(STATUSES),
        preview=text,
        result=result,
        error=st.none() | text,
        code=st.none() | text,
        field=st.none() | text,
        hint=st.none() | text,
        edited=st.booleans(),
        expired=st.booleans(),
    )


outcomes = outcomes_of(xml_text, ids, json_values)

#: Any str at all: every code point, lone surrogates and the characters XML forbids included.
any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)

#: Pieces of DIAL and of XML that, joined in any order with any text, make replies of every shape.
_MARKUP = [
    "<dial>", "</dial>", "<dial ", "<dial/>", "<dial-inform>", "</dial-inform>", "<dial-acknowledge>",
    "</dial-acknowledge>", "<dial-suggest action='a'>", "</dial-suggest>", "<dial-declare context-key='k'>",
    "</dial-declare>", "<dial-payload>", "</dial-payload>", "<dial-ask>", "<dial-option>", "</dial-option>",
    "</dial-ask>", "<b>", "</b>", "<dial-inform xmlns='urn:x'>", "&#xD83D;", "&#xDE00;", "&#55357;", "&#56832;",
    "&#0;", "&#x1b;", "&#x110000;", "&amp;", "&lol;", "&", "<", ">", "<![CDATA[", "]]>", "<!--", "-->", "<?x ",
    "?>", "<!DOCTYPE x>", "`", "```xml\n", "\n```", "\ud83d", "\ude00", "\x00", "\x1b", "\ufffe", '"', "'", "\n",
    "{", "}", "[1]", " ", "text",
]  # fmt: skip

#: Replies: markup pieces and arbitrary text in any order.
replies = st.lists(st.sampled_from(_MARKUP) | any_text, max_size=24).map("".join)

any_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(any_text, children, max_size=3),
    max_leaves=8,
)

#: Outcomes whose strings are any str at all, as a domain may produce them.
any_outcomes = outcomes_of(any_text, any_text, any_json_values)
