"""The eval's text metrics and the oracle cut (pure functions: no model)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dspark_lsp.evaluation.metrics import (
    edit_distance,
    edit_similarity,
    exact_match,
    length_of,
    line_count,
    percentile,
)
from dspark_lsp.evaluation.oracle import line_cuts, oracle_cut


def test_edit_distance_known_values() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3
    assert edit_distance("abc", "abc") == 0
    assert edit_distance("flaw", "lawn") == 2


@given(st.text(max_size=30), st.text(max_size=30))
def test_edit_distance_bounds_and_symmetry(a: str, b: str) -> None:
    d = edit_distance(a, b)
    assert d == edit_distance(b, a)
    assert abs(len(a) - len(b)) <= d <= max(len(a), len(b))
    assert (d == 0) == (a == b)


def test_similarity_and_exact_match_normalise_line_endings_and_trailing_space() -> None:
    assert edit_similarity("x = 1\r\ny = 2  \n", "x = 1\ny = 2") == 1.0
    assert exact_match("return a + b   ", "return a + b\n")
    assert not exact_match("return a - b", "return a + b")
    assert edit_similarity("abcd", "wxyz") == 0.0
    assert edit_similarity("", "") == 1.0
    assert 0.0 < edit_similarity("return a + b", "return a - b") < 1.0


def test_lengths_in_lines() -> None:
    assert line_count("") == 0 and line_count("  \n ") == 0
    assert line_count("a\nb\n") == 2
    n = length_of("a\nb\nc", "a")
    assert n.too_long and not n.too_short
    n = length_of("", "a")
    assert n.too_short and not n.too_long
    n = length_of("x", "y")
    assert not n.too_long and not n.too_short


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 95) == 10.0
    assert percentile(list(reversed(values)), 0) == 1.0
    assert percentile([], 50) is None


def test_line_cuts_are_every_line_boundary_once() -> None:
    assert line_cuts("a\nb\nc") == ["", "a", "a\nb", "a\nb\nc"]
    # "a" and "a\n" (and "a\n\n") normalise alike: judged once.
    assert line_cuts("a\n\nb\n") == ["", "a", "a\n\nb"]


def test_oracle_prefers_a_passing_cut_then_similarity_then_shortness() -> None:
    raw = "    x = 1\n    y = 2\n# Check function\nprint(x)"
    # Without tests: the cut most similar to the reference.
    cut = oracle_cut(raw, "    x = 1\n    y = 2")
    assert cut.text == "    x = 1\n    y = 2" and cut.similarity == 1.0 and cut.passed is None
    # A passing cut beats a more similar failing one.
    cut = oracle_cut(raw, "    x = 1\n    y = 2", check=lambda c: c.strip() == "x = 1")
    assert cut.text == "    x = 1" and cut.passed is True
    # Nothing passes: the most similar cut, flagged failed.
    cut = oracle_cut(raw, "    x = 1", check=lambda c: False)
    assert cut.text == "    x = 1" and cut.passed is False
    # Ties go to the shorter cut: both "" and the full text are 0-similar to "zzz".
    assert oracle_cut("q", "zzz").text == ""
