"""StreamParser: the early view agrees with the final parse for any chunking, never raises on content, stays
linear and bounded, and streams text as it arrives."""

from __future__ import annotations

import gc
import itertools
import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dial_runtime.errors import DialSizeError
from dial_runtime.language.parser import extract_prose, parse
from dial_runtime.language.records import Element
from dial_runtime.language.stream import StreamParser, TextDelta

from ..strategies import replies


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


def stream(chunks: list[str]) -> tuple[list[Element], StreamParser]:
    parser = StreamParser()
    streamed: list[Element] = []
    for chunk in chunks:
        streamed.extend(parser.feed(chunk))
    return streamed, parser


def joined(deltas: list[TextDelta]) -> dict[tuple[str, int], str]:
    texts: dict[tuple[str, int], str] = {}
    for delta in deltas:
        key = (delta.act, delta.element)
        texts[key] = delta.text if delta.replaces else texts.get(key, "") + delta.text
    return texts


def expected_texts(reply: str) -> dict[tuple[str, int], str]:
    envelope = parse(reply)
    if envelope is None:
        return {("prose", -1): reply.strip()} if reply.strip() else {}
    from dial_runtime.language.parser import envelope_bounds, unfenced

    bounds = envelope_bounds(reply)
    assert bounds is not None
    start, end, _ = bounds
    before, after = unfenced(reply[:start], reply[end:])
    texts = {("prose", -1): before.strip(), ("prose", -2): after.strip()}
    for index, element in enumerate(envelope.elements):
        if element.type in ("dial-inform", "dial-acknowledge"):
            texts[(element.type.removeprefix("dial-"), index)] = getattr(element, "text", None) or ""
    return {key: text for key, text in texts.items() if text}


WELL_FORMED = (
    "Sure, here `is` it:\n```xml\n<dial>\n  <dial-inform>Hello &amp; wel&#233;come 😀</dial-inform>\n"
    '  <dial-suggest action="add">Add <dial-payload>{"a":1}</dial-payload></dial-suggest>\n'
    "  <dial-acknowledge of='x'>  Got it  </dial-acknowledge>\n</dial>\n```\nBye now."
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(
        [WELL_FORMED, "no envelope at all", "`<dial>` quoted, then <dial><dial-inform>x</dial-inform></dial>"]
    )
    | replies,
    st.lists(st.integers(min_value=0), max_size=12),
)
def test_streamed_elements_and_texts_agree_with_the_whole_parse(reply: str, cuts: list[int]) -> None:
    streamed, parser = stream(split(reply, cuts))
    try:
        final = parse(reply)
    except DialSizeError:
        return
    closed = parser.close()
    assert closed == final
    elements = final.elements if final is not None else ()
    assert tuple(streamed) == elements[: len(streamed)]
    assert parser.text == reply
    texts = joined(parser.text_deltas())
    assert {key: text for key, text in texts.items() if text} == expected_texts(reply)
    assert parser.prose_after() == (expected_texts(reply).get(("prose", -2), "") if final is not None else "")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_a_well_formed_reply_streams_every_element_early(size: int) -> None:
    streamed, parser = stream([WELL_FORMED[n : n + size] for n in range(0, len(WELL_FORMED), size)])
    final = parser.close()
    assert final is not None and tuple(streamed) == final.elements
    assert not any(delta.replaces for delta in parser.text_deltas())


def test_text_arrives_chunk_by_chunk() -> None:
    parser = StreamParser()
    seen: list[list[tuple[str, str, int]]] = []
    for chunk in [
        "Hi ",
        "there.\n<dial><dial-inform> One",
        " &am",
        "p; two ",
        "</dial-inform>",
        "</dial> B",
        "ye",
    ]:
        parser.feed(chunk)
        seen.append([(delta.text, delta.act, delta.element) for delta in parser.text_deltas()])
    parser.close()
    seen.append([(delta.text, delta.act, delta.element) for delta in parser.text_deltas()])
    assert seen == [
        [("Hi", "prose", -1)],
        [(" there.", "prose", -1), ("One", "inform", 0)],
        [],
        [(" & two", "inform", 0)],  # what arrived since the last call, as one delta
        [],
        [("B", "prose", -2)],
        [("ye", "prose", -2)],
        [],
    ]


def test_an_inform_with_markup_gives_the_rest_when_complete() -> None:
    parser = StreamParser()
    parser.feed("<dial><dial-inform>a <b>bold</b> tail")
    assert [delta.text for delta in parser.text_deltas()] == ["a"]
    parser.feed(" more</dial-inform>")
    assert [delta.text for delta in parser.text_deltas()] == [" bold tail more"]  # inline markup reads as text


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param(["<dial><dial-inform>\ud83d</dial-inform></dial>"], id="lone-surrogate"),
        pytest.param(["<dial><dial-inform>\ud83d", "\ude00</dial-inform></dial>"], id="pair-split"),
        pytest.param(["<dial><dial-inform>&#xD8", "3D;&#xDE00;</dial-inform></dial>"], id="surrogate-refs"),
        pytest.param(["\ud800 <dial><dial-inform>x</dial-inform></dial>"], id="in-the-prose"),
    ],
)
def test_feed_never_raises_on_surrogates(chunks: list[str]) -> None:
    streamed, parser = stream(chunks)
    final = parser.close()
    assert final is not None and tuple(streamed) == final.elements[: len(streamed)]
    assert final.elements[0].text in ("x", "\ufffd", "\ufffd\ufffd", "\U0001f600")  # type: ignore[union-attr]


def test_an_empty_envelope_quoted_before_the_real_one_is_not_streamed() -> None:
    reply = "<dial><dial-inform> </dial-inform></dial> then <dial><dial-inform>real</dial-inform></dial>"
    streamed, parser = stream(list(reply))
    final = parser.close()
    assert final is not None and [element.text for element in final.elements] == ["real"]  # type: ignore[union-attr]
    assert streamed == []


# ---------------------------------------------------------------------------------------------- limits


def endless(piece: str) -> Iterator[str]:
    while True:
        yield piece


@pytest.mark.parametrize(
    ("head", "piece", "what"),
    [
        pytest.param("", "All work and no play. " * 2000, "reply", id="prose"),
        pytest.param("<dial><dial-inform>", "x" * 65536, "envelope", id="inside-an-envelope"),
    ],
)
def test_an_endless_stream_is_cut_at_the_limit_with_bounded_memory(head: str, piece: str, what: str) -> None:
    limit = 8 * 1024 * 1024
    parser = StreamParser(max_size=limit // 2, max_reply_size=limit)
    tracemalloc.start()
    try:
        parser.feed(head)
        fed = 0
        with pytest.raises(DialSizeError) as raised:
            for chunk in endless(piece):
                parser.feed(chunk)
                fed += len(chunk)
                assert fed < 400 * 1024 * 1024, "never cut"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert raised.value.what == what
    assert parser.overflow is raised.value
    assert peak < 6 * limit
    assert parser.feed(piece) == []  # raised once; later chunks are ignored
    for _ in range(1000):
        parser.feed(piece)
    assert len(parser.text) <= limit
    with pytest.raises(DialSizeError):
        parser.close()


def test_hundreds_of_megabytes_fed_past_the_limit_keep_memory_flat() -> None:
    parser = StreamParser(max_reply_size=1024 * 1024)
    piece = "y" * (1024 * 1024)
    with pytest.raises(DialSizeError):
        parser.feed(piece + "z")
    tracemalloc.start()
    try:
        for _ in range(300):
            parser.feed(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_unread_text_deltas_cost_no_more_than_their_text() -> None:
    parser = StreamParser()
    text = "words and more words " * 50_000
    tracemalloc.start()
    try:
        for start in range(0, len(text), 4):
            parser.feed(text[start : start + 4])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(text)
    assert [delta.text for delta in parser.text_deltas()] == [text.strip()]


def test_parse_limits_the_whole_reply_too() -> None:
    with pytest.raises(DialSizeError) as raised:
        parse("p" * 101 + "<dial/>", max_reply_size=100)
    assert raised.value.what == "reply"
    assert parse("p" * 93 + "<dial/>", max_reply_size=100) is not None


# ---------------------------------------------------------------------------------------------- linear time


def cpu_time(run: Callable[[], object]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def best_ratio(small: Callable[[], object], large: Callable[[], object], rounds: int = 3) -> float:
    gc.disable()
    try:
        best_small = min(cpu_time(small) for _ in range(rounds))
        best_large = min(cpu_time(large) for _ in range(rounds))
    finally:
        gc.enable()
    return best_large / best_small


def feed_all(text: str, size: int) -> Callable[[], object]:
    def run() -> None:
        parser = StreamParser()
        for start in range(0, len(text), size):
            parser.feed(text[start : start + size])
        parser.text_deltas()

    return run


PROSE = "Plain words of a long answer, with a < sign, a > sign and no envelope at all.\n"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda n: PROSE * n, id="prose-only"),
        pytest.param(lambda n: PROSE * n + "<dial><dial-inform>x</dial-inform></dial>", id="prose-then-envelope"),
        pytest.param(lambda n: "`code` " * (n * 10), id="backticks-on-one-line"),
        pytest.param(lambda n: "<dial " + "a" * (n * 80), id="an-open-start-tag"),
        pytest.param(lambda n: "<dial><dial-inform>" + "word &amp; " * (n * 8), id="a-long-inform"),
        pytest.param(lambda n: "<dial><dial-inform>x</dial-inform>" * n + "</dial>", id="many-informs"),
        pytest.param(lambda n: "<dial><dial-inform><!--" + "-" * (n * 80), id="a-long-comment"),
    ],
)
def test_streaming_time_grows_linearly(make: Callable[[int], str]) -> None:
    # 8x the input in 4-character chunks: linear work takes 8x the time, quadratic 64x.
    small, large = make(1_000), make(8_000)
    ratio = best_ratio(feed_all(small, 4), feed_all(large, 4))
    assert ratio < 16, f"8x the input took {ratio:.1f}x the time"


def test_prose_is_extracted_the_same() -> None:
    reply = "a `<dial>` b <dial><dial-inform>x</dial-inform></dial> c"
    _, parser = stream(list(reply))
    parser.close()
    texts = joined(parser.text_deltas())
    assert f"{texts[('prose', -1)]}  {texts[('prose', -2)]}" == extract_prose(reply)


def test_an_empty_envelope_streams_what_follows_it_as_no_inform() -> None:
    """``<dial/>`` closes at its own tag: an inform after it is not inside it (found by Hypothesis)."""
    reply = "<dial/><dial-inform>0"
    _, parser = stream([reply])
    assert all(delta.act == "prose" for delta in parser.text_deltas())


FENCED = st.builds(
    lambda before, tag, body, after, fence: f"{before}{fence}{tag}\n{body}\n{fence}{after}",
    st.sampled_from(["", "Here you go:\n", "Sure!\n\n"]),
    st.sampled_from(["", "xml", "html"]),
    st.sampled_from(
        ["<dial><dial-inform>Added.</dial-inform></dial>", "<dial>\n<dial-inform>x</dial-inform>\n</dial>"]
    ),
    st.sampled_from(["", "\nAnything else?", "\n\nBye."]),
    st.sampled_from(["```", "````"]),
)


@settings(max_examples=200)
@given(FENCED, st.lists(st.integers(min_value=0), max_size=12))
def test_a_fence_around_the_envelope_never_reaches_the_person(reply: str, cuts: list[int]) -> None:
    """A model's Markdown fence around its envelope is markup of the reply: neither the prose the whole parse
    reads nor any text streamed early holds a backtick, and nothing streamed is taken back."""
    _, parser = stream(split(reply, cuts))
    final = parser.close()
    assert final is not None and "`" not in final.prose
    deltas = parser.text_deltas()
    assert not any(delta.replaces for delta in deltas)
    assert all("`" not in text for text in joined(deltas).values())
