"""Value reading and the task comparison rule (type-strict, NaN == NaN), hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.tasks.values import (
    LiteralError,
    input_key,
    read_arguments,
    read_literal,
    reprs_match,
    values_equal,
)


@pytest.mark.parametrize(
    "a,b,equal",
    [
        (1, 1, True),
        (1, 1.0, False),  # int vs float
        (True, 1, False),  # bool vs int
        (False, 0, False),
        (0.5, 0.5, True),
        (math.nan, math.nan, True),  # NaN equals NaN
        ([1, math.nan], [1, math.nan], True),
        (-0.0, 0.0, True),
        (math.inf, math.inf, True),
        (math.inf, -math.inf, False),
        ((1, 2), [1, 2], False),  # tuple vs list
        ([1, [2, 3]], [1, [2, 3]], True),
        ([1, [2, 3]], [1, [2, 3.0]], False),
        ({1, 2}, {2, 1}, True),
        ({1}, frozenset({1}), False),
        ({"a": 1, "b": [2]}, {"b": [2], "a": 1}, True),
        ({1: "a"}, {True: "a"}, False),  # keys are type-strict too
        ({1: "a"}, {1.0: "a"}, False),
        ("a", b"a", False),
        (None, None, True),
        (None, 0, False),
        (1 + 2j, 1 + 2j, True),
        (complex(1, 0), 1, False),
        ("", "", True),
    ],
)
def test_values_equal(a, b, equal):
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal


def test_non_literal_objects_are_never_equal():
    class X:
        pass

    x = X()
    assert values_equal(x, x) is False


def test_read_literal_and_nonfinite():
    assert read_literal("[1, 'a', (2.5, None)]") == [1, "a", (2.5, None)]
    assert math.isnan(read_literal("nan"))
    assert read_literal("[inf, -inf]") == [math.inf, -math.inf]
    assert read_literal("  {1, 2}  ") == {1, 2}
    assert read_literal("set()") == set()
    for bad in ["__import__('os')", "f(1)", "x", "[1, 2", "1 +", "lambda: 1", "a.b", "nan()", ""]:
        with pytest.raises(LiteralError):
            read_literal(bad)


def test_read_literal_never_evaluates_code(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(LiteralError):
        read_literal(f"open({str(marker)!r}, 'w').write('x')")
    assert not marker.exists()


def test_read_arguments():
    assert read_arguments("1, [2, 3]") == (1, [2, 3])
    assert read_arguments("'a'") == ("a",)
    assert read_arguments("(1, 2)") == ((1, 2),)
    assert read_arguments("1, 2,") == (1, 2)
    assert read_arguments("") == ()
    for bad in ["x=1", "*[1, 2]", "1), g(2", "print(1)", "1; 2", "[1,", "**{}"]:
        with pytest.raises(LiteralError):
            read_arguments(bad)


def test_reprs_match():
    assert reprs_match("[1, 2]", "[1,2]")
    assert not reprs_match("[1, 2]", "(1, 2)")
    assert not reprs_match("1", "1.0")
    assert not reprs_match("True", "1")
    assert reprs_match("nan", "nan")
    assert reprs_match("{'b': 2, 'a': 1}", "{'a': 1, 'b': 2}")
    # a non-literal repr (code_f outputs may be any repr) must match exactly
    assert reprs_match("Counter({'a': 1})", "Counter({'a': 1})")
    assert not reprs_match("Counter({'a': 1})", "{'a': 1}")


def test_input_key_by_value():
    assert input_key("1,[2]") == input_key("1, [2]")
    assert input_key("1") != input_key("1.0")
    assert input_key("not valid (") == input_key("not valid (  ")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_reading_raises_only_literal_error(text):
    for reader in (read_literal, read_arguments):
        try:
            reader(text)
        except LiteralError:
            pass
    assert reprs_match(text, text) in (True, False)
