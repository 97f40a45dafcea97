"""The slow-answers watch (latency_note.py): the note comes due once the median of a full window of answers
is over the bound, is given once, and never again in that server's life."""

from __future__ import annotations

import pytest

from dspark_lsp.latency_note import SlowAnswers


def _watch(bound: float = 400.0, window: int = 5) -> SlowAnswers:
    return SlowAnswers(lambda median, n: f"{median:.0f} ms over {n}", bound_ms=bound, window=window)


def test_no_note_before_a_full_window_nor_while_the_median_is_within_the_bound() -> None:
    watch = _watch()
    for ms in (900, 900, 900, 900):
        watch.observe(ms)
    assert watch.take() is None  # 4 of 5: not enough to say
    watch.observe(100)
    assert watch.take() == "900 ms over 5"  # median of 900 x4 and 100
    fast = _watch()
    for ms in (100, 120, 900, 950, 390):  # a few slow ones do not make the median slow
        fast.observe(ms)
    assert fast.take() is None


def test_the_note_is_given_once_and_a_later_slow_spell_says_nothing_more() -> None:
    watch = _watch(window=3)
    for ms in (500, 600, 700):
        watch.observe(ms)
    assert watch.take() == "600 ms over 3"
    assert watch.take() is None
    for ms in (800, 900, 1000, 1100):
        watch.observe(ms)
    assert watch.take() is None


def test_the_window_slides_past_a_fast_start() -> None:
    watch = _watch(window=3)
    for ms in (50, 60, 70, 500):
        watch.observe(ms)
    assert watch.take() is None  # the last three: 60, 70, 500
    watch.observe(600)
    assert watch.take() == "500 ms over 3"  # 70, 500, 600


@pytest.mark.parametrize("kw", [{"window": 0}, {"bound_ms": 0.0}])
def test_bad_bounds_are_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        SlowAnswers(lambda m, n: "", **kw)
