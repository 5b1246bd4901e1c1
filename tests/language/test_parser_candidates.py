"""Which <dial> of a reply is the envelope: not one in inline code, the first whose elements carry content; and
envelopes that give nothing to show or do are flagged."""

from __future__ import annotations

import pytest

from dial_runtime.language.parser import MAX_CANDIDATES, extract_prose, parse

REAL = "<dial><dial-inform>real</dial-inform></dial>"


@pytest.mark.parametrize(
    ("reply", "texts", "prose", "codes"),
    [
        pytest.param("Write every reply as one `<dial>` envelope.\n" + REAL, ["real"],
                     "Write every reply as one `<dial>` envelope.", [], id="inline-code"),
        pytest.param("Use ``<dial>`` and `<dial/>` here: " + REAL, ["real"],
                     "Use ``<dial>`` and `<dial/>` here:", [], id="double-backticks-and-self-closing"),
        pytest.param("Write every reply as one <dial> envelope.\n" + REAL, ["real"],
                     "Write every reply as one <dial> envelope.", ["quoted-envelope"], id="bare-quote-in-prose"),
        pytest.param("```xml\n" + REAL + "\n```", ["real"], "", [], id="markdown-fence"),
        pytest.param("Here:\n\n```\n" + REAL + "\n```\nDone.", ["real"], "Here:\n\nDone.", [],
                     id="plain-fence"),
        pytest.param("don`t " + REAL, ["real"], "don`t", [], id="an-unclosed-backtick-is-literal"),
        pytest.param("`a\n" + REAL + " b`", ["real"], "`a\n b`", [], id="inline-code-ends-at-the-line"),
        pytest.param("`` ` " + REAL + " ``", [], "`` ` <dial><dial-inform>real</dial-inform></dial> ``", [],
                     id="a-shorter-run-does-not-close"),
        pytest.param("<dial></dial> then " + REAL, ["real"], "<dial></dial> then", ["quoted-envelope"],
                     id="an-empty-envelope-before-a-real-one"),
        pytest.param(REAL + " and <dial><dial-inform>later</dial-inform></dial>", ["real"],
                     "and <dial><dial-inform>later</dial-inform></dial>", ["extra-envelope"],
                     id="first-real-wins"),
    ],
)  # fmt: skip
def test_the_envelope_is_the_first_candidate_with_content(
    reply: str, texts: list[str], prose: str, codes: list[str]
) -> None:
    result = parse(reply)
    assert result is not None or not texts
    if result is not None:
        assert [element.text for element in result.elements] == texts
        assert [issue.code for issue in result.issues if issue.code != "schema"] == codes
    assert extract_prose(reply) == prose


def test_the_skipped_candidate_is_reported_with_its_line() -> None:
    result = parse("As one <dial> envelope,\nlike this:\n" + REAL)
    assert result is not None
    assert [(issue.code, issue.line) for issue in result.issues] == [("quoted-envelope", 1)]


@pytest.mark.parametrize(
    ("body", "usable"),
    [
        pytest.param("<dial-inform>   </dial-inform><dial-inform>\n</dial-inform>", False, id="blank-informs"),
        pytest.param("<dial-acknowledge of='x'/><dial-phatic/>", False, id="nothing-to-show"),
        pytest.param("<dial-execute/><dial-phatic/>", False, id="empty-execute-and-phatic"),
        pytest.param("<dial-ask/>", True, id="an-ask-always-counts"),
        pytest.param("<dial-inform> </dial-inform><dial-inform>x</dial-inform>", True, id="one-with-text"),
        pytest.param("<dial-suggest/>", True, id="a-suggestion-always-counts"),
        pytest.param("<dial-inform><dial-payload>{}</dial-payload></dial-inform>", True, id="a-payload"),
        pytest.param("<dial-phatic signal='typing'/>", True, id="a-signal"),
        pytest.param("<dial-declare context-key='k'/>", True, id="a-fact"),
        pytest.param("<dial-delegate to='billing'/>", True, id="a-delegation"),
        pytest.param("<dial-ask><dial-option>a</dial-option></dial-ask>", True, id="options"),
    ],
)
def test_an_envelope_of_empty_elements_is_not_usable(body: str, usable: bool) -> None:
    result = parse(f"<dial>{body}</dial>")
    assert result is not None
    assert result.usable is usable
    assert ("empty-envelope" in {issue.code for issue in result.issues}) is not usable


def test_an_envelope_without_elements_is_not_usable_and_says_nothing_more() -> None:
    result = parse("<dial/>")
    assert result is not None and not result.usable and result.issues == ()


def test_when_no_candidate_has_content_the_first_is_the_envelope() -> None:
    reply = "<dial><dial-inform> </dial-inform></dial> <dial></dial>"
    result = parse(reply)
    assert result is not None
    assert result.raw == "<dial><dial-inform> </dial-inform></dial>"
    assert [issue.code for issue in result.issues] == ["empty-envelope", "extra-envelope"]


def test_candidates_tried_are_bounded() -> None:
    reply = "<dial></dial>" * (MAX_CANDIDATES + 1) + REAL
    result = parse(reply)
    assert result is not None and result.raw == "<dial></dial>"
