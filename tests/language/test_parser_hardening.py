"""The parser against hostile replies: external entities, entity bombs, DTDs, oversize envelopes, and inputs built
to make a parser slow. Nothing is expanded, fetched or read; the envelope's size is checked before parsing; time
grows linearly with the input (measured as a ratio between two sizes, never as an absolute time).
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from dial_runtime.errors import DialError, DialSizeError
from dial_runtime.language.parser import DEFAULT_MAX_SIZE, MAX_ISSUES_PER_CODE, extract_prose, parse
from dial_runtime.language.records import Envelope, Inform, Suggest

from ..strategies import replies

SECRET = "top-secret-4f1c9a"

LAUGHS = (
    '<!DOCTYPE lolz [<!ENTITY lol "lol">'
    '<!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
    '<!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">'
    '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">'
    '<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">'
    '<!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">'
    '<!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">'
    '<!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">'
    '<!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">'
    '<!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">]>'
)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A local TCP port that records whether anything connected to it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


def nothing_connected(server: socket.socket) -> bool:
    readable, _, _ = select.select([server], [], [], 0)
    return not readable


def envelope(reply: str) -> Envelope:
    result = parse(reply)
    assert result is not None
    return result


def assert_not_leaked(result: Envelope) -> None:
    assert SECRET not in repr(result)
    assert "lollollol" not in repr(result)


# ---------------------------------------------------------------------------------------------- entities and DTDs


def xxe_replies(secret: Path, url: str) -> list[tuple[str, str]]:
    file_doctype = f'<!DOCTYPE dial [<!ENTITY xxe SYSTEM "file://{secret}">]>'
    url_doctype = f'<!DOCTYPE dial [<!ENTITY xxe SYSTEM "{url}">]>'
    parameter = f'<!DOCTYPE dial [<!ENTITY % pe SYSTEM "file://{secret}"> %pe;]>'
    remote_parameter = f'<!DOCTYPE dial [<!ENTITY % pe SYSTEM "{url}"> %pe;]>'
    external_dtd = f'<!DOCTYPE dial SYSTEM "{url}">'
    body = "<dial-inform>&xxe;</dial-inform>"
    return [
        ("file-entity-in-prose", f'<?xml version="1.0"?>\n{file_doctype}\n<dial>{body}</dial>'),
        ("file-entity-in-envelope", f"<dial>{file_doctype}{body}</dial>"),
        ("http-entity-in-prose", f"{url_doctype}\n<dial>{body}</dial>"),
        ("http-entity-in-envelope", f"<dial>\n{url_doctype}\n{body}</dial>"),
        ("parameter-entity-in-prose", f"{parameter}<dial>{body}</dial>"),
        ("parameter-entity-in-envelope", f"<dial>{parameter}{body}</dial>"),
        ("remote-parameter-entity-in-envelope", f"<dial>{remote_parameter}{body}</dial>"),
        ("external-dtd-in-prose", f"{external_dtd}<dial>{body}</dial>"),
        ("external-dtd-in-envelope", f"<dial>{external_dtd}{body}</dial>"),
        (
            "xinclude",
            f'<dial><xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="file://{secret}"/></dial>',
        ),
        ("entity-without-doctype", f"<dial><!ENTITY xxe SYSTEM 'file://{secret}'>{body}</dial>"),
    ]


CASES = [name for name, _ in xxe_replies(Path("/x"), "http://x/")]


@pytest.mark.parametrize("case", CASES)
def test_external_entities_are_never_expanded_or_fetched(
    case: str, secret_file: Path, listener: socket.socket
) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/evil.dtd"
    reply = dict(xxe_replies(secret_file, url))[case]
    result = envelope(reply)
    assert_not_leaked(result)
    assert SECRET not in extract_prose(reply)
    assert nothing_connected(listener)
    for element in result.elements:
        assert isinstance(element, Inform)
        assert element.text in (None, "&xxe;")  # kept as literal text, never replaced
    if "&xxe;" in result.raw:
        assert "entity" in {issue.code for issue in result.issues}
    if "envelope" in case:
        assert "doctype" in {issue.code for issue in result.issues}


@pytest.mark.parametrize("where", ["prose", "envelope"])
def test_billion_laughs_is_not_expanded(where: str) -> None:
    body = "<dial-inform>&lol9;</dial-inform>"
    reply = f"{LAUGHS}\n<dial>{body}</dial>" if where == "prose" else f"<dial>{LAUGHS}{body}</dial>"
    result = envelope(reply)
    assert_not_leaked(result)
    assert result.elements == (Inform(text="&lol9;", line=result.elements[0].line),)
    assert "entity" in {issue.code for issue in result.issues}


def test_quadratic_blowup_entity_is_not_expanded() -> None:
    doctype = f'<!DOCTYPE d [<!ENTITY a "{"x" * 100_000}">]>'
    result = envelope(f"<dial>{doctype}<dial-inform>{'&a;' * 1000}</dial-inform></dial>")
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    assert inform.text == "&a;" * 1000
    assert all("xxxx" not in issue.message for issue in result.issues)


# ---------------------------------------------------------------------------------------------- size


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        pytest.param("<dial><dial-inform>hello</dial-inform></dial>", 20, id="ascii"),
        pytest.param("<dial><dial-inform>héllo wörld</dial-inform></dial>", 40, id="utf8-bytes"),
        pytest.param("<dial><dial-inform>a & < broken", 10, id="malformed-not-parsed-first"),
    ],
)
def test_oversize_envelope_raises_before_parsing(body: str, limit: int) -> None:
    with pytest.raises(DialSizeError) as caught:
        parse(f"prose {body}", max_size=limit)
    assert caught.value.size == len(body.encode())
    assert caught.value.limit == limit
    assert isinstance(caught.value, DialError)
    assert isinstance(caught.value, ValueError)


def test_size_is_counted_in_utf8_bytes_and_the_limit_is_inclusive() -> None:
    body = "<dial><dial-inform>é</dial-inform></dial>"
    size = len(body.encode())
    assert size == len(body) + 1
    assert parse(body, max_size=size) is not None
    with pytest.raises(DialSizeError):
        parse(body, max_size=size - 1)


def test_prose_around_the_envelope_is_not_limited() -> None:
    prose = "words " * 10_000
    result = parse(f"{prose}<dial><dial-inform>x</dial-inform></dial>{prose}", max_size=64)
    assert result is not None
    assert result.elements[0].line == 1


def test_default_limit_allows_a_large_envelope() -> None:
    body = "<dial>" + "<dial-inform>x</dial-inform>" * 40_000 + "</dial>"
    assert len(body) < DEFAULT_MAX_SIZE
    assert len(envelope(body).elements) == 40_000


# ---------------------------------------------------------------------------------------------- hostile shapes


def test_deep_nesting_recovers_cleanly() -> None:
    depth = 100_000
    result = envelope("<dial>" + "<dial-inform>x" * depth + "</dial-inform>" * depth + "</dial>")
    assert [element.type for element in result.elements] == ["dial-inform"]
    messages = [issue.message for issue in result.issues if issue.code == "recovered"]
    assert any("depth" in message for message in messages)
    assert "nested-element" in {issue.code for issue in result.issues}


def test_deeply_nested_json_is_invalid_json_not_a_crash() -> None:
    result = envelope("<dial><dial-inform><dial-payload>" + "[" * 100_000 + "</dial-payload></dial-inform></dial>")
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    assert inform.payload is None
    assert [issue.code for issue in result.issues] == ["invalid-json"]


def test_huge_json_integer_does_not_escape() -> None:
    digits = "9" * 50_000
    result = envelope(f"<dial><dial-inform><dial-payload>{digits}</dial-payload></dial-inform></dial>")
    inform = result.elements[0]
    assert isinstance(inform, Inform)
    if hasattr(sys, "get_int_max_str_digits"):  # int() has a digit limit (3.11, and 3.10 from 3.10.7)
        assert inform.payload is None
        assert [issue.code for issue in result.issues] == ["invalid-json"]
    else:
        assert inform.payload == int(digits)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a\x00b\x0bc", id="control-characters"),
        pytest.param("a\ud800b", id="lone-surrogate"),
        pytest.param("\ufffe\uffff", id="non-characters"),
    ],
)
def test_characters_xml_forbids_are_dropped_with_an_issue(text: str) -> None:
    result = envelope(f"<dial><dial-inform>{text}</dial-inform></dial>")
    assert [element.type for element in result.elements] == ["dial-inform"]
    assert "recovered" in {issue.code for issue in result.issues}


def test_issue_list_stays_bounded() -> None:
    reply = "<dial>" + "<dial-foo/>" * 10_000 + "&" * 10_000 + "</dial>" + "<dial/>" * 10_000
    result = envelope(reply)
    assert len(result.issues) <= 6 * (MAX_ISSUES_PER_CODE + 1)
    summaries = [issue for issue in result.issues if issue.message.endswith("issues are not listed")]
    assert {issue.code for issue in summaries} >= {"unknown-element", "recovered", "extra-envelope"}


def test_parse_is_safe_from_several_threads() -> None:
    replies = [
        "<dial><dial-inform>ok</dial-inform></dial>",
        "<dial><dial-foo/><dial-ask timeout='x'>q</dial-ask></dial>",
        "<dial><dial-inform>a & b <c</dial-inform></dial>",
        "text <dial><dial-suggest action='a'><dial-payload>{bad</dial-payload></dial-suggest></dial>",
    ]
    expected = [parse(reply) for reply in replies]
    start = threading.Barrier(4)

    def work(offset: int) -> bool:
        start.wait()
        return all(parse(replies[(offset + i) % 4]) == expected[(offset + i) % 4] for i in range(400))

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(work, range(4)))


# ---------------------------------------------------------------------------------------------- linear time

SUGGESTION = (
    "<dial>\n"
    '  <dial-suggest action="add-item">Add "buy milk"</dial-suggest>\n'
    '  <dial-declare context-key="add-item">{"text":"buy milk"}</dial-declare>\n'
    "</dial>"
)
PROSE_LINE = "Some words, a <b>tag</b>, an & and a < sign, <dialog> and 3 > 2 in ordinary prose.\n"
INFORM = '<dial-inform id="i" yield="a b">An inform with ordinary text &amp; an entity.</dial-inform>\n'


def prose(size: int) -> str:
    half = PROSE_LINE * (size // len(PROSE_LINE) // 2)
    return half + SUGGESTION + half


def informs(size: int) -> str:
    return "<dial>" + INFORM * (size // len(INFORM)) + "</dial>"


def unclosed(count: int) -> str:
    """Tags left open inside acts that are closed: each is closed by the repair where its act ends."""
    return "<dial>" + "<dial-inform>x <b>y</dial-inform>\n" * count + "</dial>"


def unclosed_nested(count: int) -> str:
    """Acts left open, each inside the previous one: libxml2's depth limit stops the parse."""
    return "<dial>" + "<dial-inform>x" * count + "</dial>"


def schema_errors(count: int) -> str:
    """Many acts the schema rejects: libxml2 counts an element's preceding siblings for each error's path."""
    return "<dial>" + '<dial-inform><dial-payload schema="[">1</dial-payload></dial-inform>\n' * count + "</dial>"


def option_errors(count: int) -> str:
    return "<dial><dial-ask>" + '<dial-option default="maybe">a</dial-option>\n' * count + "</dial-ask></dial>"


def stray_end_tags(count: int) -> str:
    return "<dial><dial-inform>" + "a</b>" * count + "</dial-inform></dial>"


def nested(count: int) -> str:
    return "<dial>" + "<dial-inform>" * count + "x" + "</dial-inform>" * count + "</dial>"


def raw_markup(count: int) -> str:
    return "<dial><dial-execute><step>" + "a && b < c <d e " * count + "</step></dial-execute></dial>"


def open_sections(count: int) -> str:
    return "<dial><dial-inform>" + "<!-- <? <![CDATA[ &x; " * count + "</dial-inform></dial>"


def attributes(count: int) -> str:
    """One act with many attributes: lxml's items() looks each value up by name."""
    return "<dial><dial-inform " + " ".join(f'a{n}="v"' for n in range(count)) + ">x</dial-inform></dial>"


def wide_attributes(count: int) -> str:
    """Many attributes on an act with enough children to be validated in windows."""
    options = "<dial-option>o</dial-option>" * 70
    return "<dial><dial-ask " + " ".join(f'a{n}="v"' for n in range(count)) + f">{options}</dial-ask></dial>"


def quoted_candidates(count: int) -> str:
    """Envelope starts in inline code, runs of backticks that close nothing, and empty candidates."""
    return "`<dial>` `` ` <dial> " * count + "\n" + "<dial></dial>\n" * count + SUGGESTION


def start_candidates(count: int) -> str:
    return '<dial title="' * count + SUGGESTION


def cpu_time(reply: str) -> float:
    started = time.process_time()
    parse(reply)
    return time.process_time() - started


def time_ratio(small: str, large: str, *, within: float) -> float:
    """CPU time to parse ``large`` over the time for ``small``: the least of several interleaved runs each.

    CPU time, unlike wall time, does not count other processes' turns; interleaving spreads a slow spell of the
    machine over both sizes; the cyclic garbage collector is paused, since its passes depend on everything else
    alive in the process. While the ratio is above ``within``, more runs are taken (up to four times as many):
    superlinear work stays above the bound however often it runs, a slow spell of a shared machine does not.
    """
    gc.disable()
    try:
        best_small = cpu_time(small)
        best_large = float("inf")
        runs = 2 if best_small > 0.05 else 5  # more runs when one is short, so a hiccup cannot decide
        for run in range(4 * runs):
            best_large = min(best_large, cpu_time(large))
            best_small = min(best_small, cpu_time(small))
            if run + 1 >= runs and best_large / best_small <= within:
                break
    finally:
        gc.enable()
    return best_large / best_small


@pytest.mark.parametrize(
    ("make", "size"),
    [
        pytest.param(prose, 5_000_000, id="prose-5MB-vs-10MB"),
        pytest.param(informs, 2_000_000, id="envelope-2MB-vs-4MB"),
        pytest.param(unclosed_nested, 50_000, id="unclosed-50k-vs-100k"),
        pytest.param(nested, 50_000, id="nested-50k-vs-100k"),
        pytest.param(unclosed, 5_000, id="unclosed-in-acts-5k-vs-10k"),
        pytest.param(stray_end_tags, 10_000, id="stray-end-tags-10k-vs-20k"),
        pytest.param(schema_errors, 10_000, id="schema-errors-10k-vs-20k"),
        pytest.param(option_errors, 10_000, id="option-errors-10k-vs-20k"),
        pytest.param(raw_markup, 5_000, id="raw-and-lt-5k-vs-10k"),
        pytest.param(open_sections, 5_000, id="unterminated-sections-5k-vs-10k"),
        pytest.param(start_candidates, 50_000, id="start-tag-candidates-50k-vs-100k"),
        pytest.param(attributes, 10_000, id="attributes-10k-vs-20k"),
        pytest.param(quoted_candidates, 20_000, id="quoted-candidates-20k-vs-40k"),
        pytest.param(wide_attributes, 10_000, id="attributes-windowed-10k-vs-20k"),
    ],
)
def test_time_grows_linearly(make: Callable[[int], str], size: int) -> None:
    ratio = time_ratio_in_a_child(make, size, within=3.5)
    # Linear work doubles (2.0); quadratic work quadruples (4.0). Between them lies what a shared machine adds to
    # the larger input (caches, memory), measured here up to about 3.3.
    assert ratio <= 3.5, f"doubling the input multiplied the time by {ratio:.2f}"


#: glibc's allocator, told to keep blocks of up to 32 MB on its heap and never to give the heap back: otherwise
#: each large string the parser makes is mapped afresh, and the page faults of one size but not the other (which
#: depends on what ran before in the process) can weigh more than the parsing itself.
STEADY_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def time_ratio_in_a_child(make: Callable[[int], str], size: int, *, within: float) -> float:
    """:func:`time_ratio` for ``make(size)`` and ``make(2 * size)``, measured in a fresh interpreter with a
    steady heap (:data:`STEADY_HEAP`), so the figure is the parser's and not the process's history."""
    code = (
        "import sys\n"
        "from tests.language import test_parser_hardening as module\n"
        "make, size, within = getattr(module, sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])\n"
        "print(module.time_ratio(make(size), make(2 * size), within=within))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, make.__name__, str(size), str(within)],
        cwd=Path(__file__).parents[2],
        env={**os.environ, **STEADY_HEAP},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    return float(child.stdout)


# ---------------------------------------------------------------------------------------------- any content


@pytest.mark.parametrize(
    ("body", "text", "codes"),
    [
        pytest.param("&#xD83D;&#xDE00;", "\U0001f600", [], id="hex-pair"),
        pytest.param("&#55357;&#56832;", "\U0001f600", [], id="decimal-pair"),
        pytest.param("a&#xD83D;b", "a\ufffdb", ["recovered"], id="lone-high"),
        pytest.param("&#xDE00;&#xD83D;", "\ufffd\ufffd", ["recovered", "recovered"], id="reversed-pair"),
        pytest.param("&#x0000D83D;x", "\ufffdx", ["recovered"], id="leading-zeros"),
        pytest.param("a\ud83db", "a\ufffdb", ["recovered"], id="raw-lone-surrogate"),
        pytest.param("\ud83d\ude00", "\ufffd\ufffd", ["recovered"], id="raw-pair-is-two-lone-surrogates"),
        pytest.param("<![CDATA[&#xD83D;]]>&#xD83D;&#xDE00;", "&#xD83D;\U0001f600", [], id="cdata-stays-literal"),
    ],
)
def test_surrogates_are_decoded_in_pairs_and_replaced_alone(body: str, text: str, codes: list[str]) -> None:
    result = envelope(f"<dial><dial-inform>{body}</dial-inform></dial>")
    assert [element.text for element in result.elements] == [text]
    assert [issue.code for issue in result.issues if issue.code != "schema"] == codes


def test_a_surrogate_reference_in_an_attribute_is_decoded() -> None:
    result = envelope('<dial><dial-suggest action="&#xD83D;&#xDE00;&#xD83D;">x</dial-suggest></dial>')
    suggest = result.elements[0]
    assert isinstance(suggest, Suggest)
    assert suggest.action == "\U0001f600\ufffd"
    assert [issue.code for issue in result.issues] == ["recovered"]


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(replies)
def test_parse_never_raises_on_content(reply: str) -> None:
    with contextlib.suppress(DialSizeError):
        parse(reply)
