"""to_json_ready: every value becomes JSON data that json and msgspec encode, bounded in depth and size."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from enum import IntEnum
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dial_runtime.language.outcomes import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_TEXT,
    MAX_TOTAL_TEXT,
    _Budget,
    _convert,
    to_json_ready,
)

from ..strategies import any_text


class Unprintable:
    def __str__(self) -> str:
        raise ValueError("no")

    def __repr__(self) -> str:
        raise RuntimeError("no")


class OnlyRepr:
    def __str__(self) -> str:
        raise ValueError("no")

    def __repr__(self) -> str:
        return "OnlyRepr()"


class Colour(IntEnum):
    RED = 1


class BrokenMapping(dict[str, int]):
    def items(self) -> Any:
        raise KeyError("broken")


def self_referencing_dict() -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    value["me"] = value
    return value


def self_referencing_list() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def depth_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(item) for item in value.values()), default=0)
    return 0


SHARED = [1, 2]

CASES = [
    pytest.param(None, None, id="none"),
    pytest.param(True, True, id="bool"),
    pytest.param(-(2**70), -(2**70), id="big-int-stays"),
    pytest.param(Colour.RED, 1, id="int-enum"),
    pytest.param(1.5, 1.5, id="float"),
    pytest.param(math.nan, "nan", id="nan"),
    pytest.param(-math.inf, "-inf", id="minus-inf"),
    pytest.param("a\ud83db", "a\ufffdb", id="lone-surrogate"),
    pytest.param({1: "x", None: [1, (2,)]}, {"1": "x", "None": [1, [2]]}, id="keys-become-str"),
    pytest.param(OrderedDict(a=1), {"a": 1}, id="mapping"),
    pytest.param(frozenset({3}), [3], id="frozenset"),
    pytest.param(b"ab\x00", "b'ab\\x00'", id="bytes"),
    pytest.param(OnlyRepr(), "OnlyRepr()", id="str-raises-repr-works"),
    pytest.param(Unprintable(), "[unprintable Unprintable: ValueError]", id="str-and-repr-raise"),
    pytest.param(BrokenMapping(a=1), "[unprintable BrokenMapping: KeyError]", id="mapping-raises"),
    pytest.param(self_referencing_dict(), {"a": 1, "me": "[cut: refers to itself]"}, id="dict-in-itself"),
    pytest.param(self_referencing_list(), [1, "[cut: refers to itself]"], id="list-in-itself"),
    pytest.param([SHARED, SHARED], [[1, 2], [1, 2]], id="shared-is-not-a-cycle"),
    pytest.param(10**5000, "[cut: an integer of 16610 bits]", id="int-of-5000-digits"),
    pytest.param(10**4300, "[cut: an integer of 14285 bits]", id="int-of-4301-digits"),
    pytest.param(10**4299, 10**4299, id="int-of-4300-digits"),
    pytest.param(nested(MAX_DEPTH - 1), nested(MAX_DEPTH - 1), id="depth-at-the-limit"),
]


def encodable(value: Any) -> None:
    json.dumps(value, allow_nan=False)
    msgspec.json.encode(value)


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_values_convert(value: Any, expected: Any) -> None:
    result = to_json_ready(value)
    assert result == expected
    encodable(result)


def test_nesting_past_the_limit_is_cut_with_a_marker() -> None:
    result = to_json_ready(nested(10_000))
    assert depth_of(result) == MAX_DEPTH
    encodable(result)
    assert "[cut: nested deeper than 32 levels]" in json.dumps(result)


def test_a_long_string_is_cut_with_a_marker() -> None:
    result = to_json_ready("x" * (MAX_TEXT + 10))
    assert result == "x" * MAX_TEXT + "… [cut: 10 more characters]"


def test_a_long_str_of_an_object_and_long_bytes_are_cut() -> None:
    class Long:
        def __str__(self) -> str:
            return "y" * (MAX_TEXT * 2)

    assert to_json_ready(Long()).endswith(f"… [cut: {MAX_TEXT} more characters]")
    assert to_json_ready(b"z" * (MAX_TEXT * 2)).endswith(f"… [cut: {MAX_TEXT + 3} more characters]")


def test_many_items_are_cut_at_the_limit() -> None:
    result = to_json_ready(list(range(MAX_ITEMS + 5)))
    assert len(result) == MAX_ITEMS + 1
    assert result[-1] == "[cut: 5 more items]"
    cut = to_json_ready({str(n): n for n in range(MAX_ITEMS + 5)})
    assert cut["…"] == "[cut: 5 more entries]"


def test_total_text_is_bounded() -> None:
    result = to_json_ready(["w" * MAX_TEXT] * 100)
    assert sum(len(item) for item in result) < MAX_TOTAL_TEXT + 200
    assert result[-1] == f"[cut: {100 - MAX_TOTAL_TEXT // MAX_TEXT} more items]"


def test_a_huge_nested_structure_stays_bounded() -> None:
    wide = [{"k" * 1000: ["v" * 1000] * 1000} for _ in range(100)]
    result = to_json_ready(wide)
    assert len(json.dumps(result)) < 2 * MAX_TOTAL_TEXT + 10 * MAX_ITEMS


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.frozensets(st.integers(), max_size=3)
        | st.dictionaries(any_text | st.integers() | st.floats(), children, max_size=3)
    ),
    max_leaves=12,
)


@given(json_like)
def test_every_value_becomes_encodable_json(value: Any) -> None:
    result = to_json_ready(value)
    encodable(result)
    assert to_json_ready(result) == result  # what it gives is already JSON-ready


FLAT_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=300)
    | st.text(alphabet=st.characters(max_codepoint=127), min_size=250, max_size=260)
)


@given(st.dictionaries(st.text(max_size=260) | st.integers(), FLAT_SCALARS, max_size=70))
def test_a_flat_dict_converts_as_the_general_path_does(value: dict[Any, Any]) -> None:
    """The copy-only path for a dict of short ASCII keys and plain scalars gives what the general conversion
    gives, and copies: the caller's dict changing later changes nothing recorded."""
    converted = to_json_ready(value)
    assert json.dumps(converted, allow_nan=False, sort_keys=True) == json.dumps(
        _convert(value, _Budget(), 0), allow_nan=False, sort_keys=True
    )
    assert converted is not value
