"""Forward padding (engine.costs.plan_forwards + DecodeConfig.pad_to): the plan pads only where a measured
length is cheaper, the effective curve is non-decreasing, and padded decoding is lossless."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.costs import (
    CALIBRATION_SIZES,
    calibrate_forwards,
    interpolate_cost,
    measure_verify_cost,
    plan_forwards,
    raw_monotone,
)
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.kv import cache_len, new_cache

# Measured on the CI machine with packed fp32 weights (ms for 1..6 and 8 tokens).
CI_CURVE = {1: 80.1, 2: 99.1, 3: 75.2, 4: 71.0, 5: 72.6, 6: 73.8, 8: 95.5}


def test_plan_pads_small_forwards_to_the_cheap_shape() -> None:
    plan = plan_forwards(CI_CURVE)
    assert plan.pad_to == {1: 4, 2: 4, 3: 4}  # 3 -> 4 saves 5.6%; 5 -> 6 would cost more
    assert plan.measured_ms == CI_CURVE
    assert plan.cost_ms[1] == plan.cost_ms[2] == plan.cost_ms[4] == 71.0
    assert plan.cost_ms[7] == pytest.approx((73.8 + 95.5) / 2, abs=0.01)  # interpolated, never padded to
    assert 7 not in plan.pad_to


@given(st.dictionaries(st.integers(1, 10), st.floats(1.0, 500.0), min_size=1, max_size=8))
def test_plan_is_consistent_for_any_curve(raw: dict[int, float]) -> None:
    plan = plan_forwards(raw)
    ns = sorted(plan.cost_ms)
    assert ns == list(range(1, max(raw) + 1))
    assert all(plan.cost_ms[a] <= plan.cost_ms[b] for a, b in zip(ns, ns[1:], strict=False))  # non-decreasing
    for n, m in plan.pad_to.items():
        # Only to a measured, longer length that saves at least 3% on the (interpolated) cost of n.
        assert m > n and m in raw and raw[m] <= interpolate_cost(raw, n) * 0.97 + 1e-9
    # A curve that already rises never pads.
    assert plan_forwards(raw_monotone(raw)).pad_to == {}


def test_measured_curve_has_every_size(random_lm: Any) -> None:
    model = random_lm(1, vocab_size=48, hidden=16)
    raw = measure_verify_cost(model, context=16, sizes=(1, 2, 3), repeats=1)
    assert set(raw) == {1, 2, 3} and all(v > 0 for v in raw.values())


def test_calibration_measures_in_rounds_over_the_sizes(random_lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One round of every size, then the next: a slow spell of a shared host then cannot take every
    sample of one size (size by size, the Zen 4 VM once measured 1 token as dear as 2)."""
    from dspark_lsp.engine import kv

    model = random_lm(1, vocab_size=48, hidden=16)
    widths: list[int] = []
    real = kv.forward

    def spy(m: Any, ids: list[int], cache: Any, **kw: Any) -> Any:
        widths.append(len(ids))
        return real(m, ids, cache, **kw)

    monkeypatch.setattr(kv, "forward", spy)
    raw = measure_verify_cost(model, context=16, sizes=(1, 2, 4), repeats=3)
    assert set(raw) == {1, 2, 4}
    assert widths[2:] == [1, 2, 4] * 3  # after the prefill (16) and the decode warm-up (1)


def test_calibration_plans_from_what_it_measured(random_lm: Any) -> None:
    plan = calibrate_forwards(random_lm(2, vocab_size=48, hidden=16))
    assert set(plan.measured_ms) == set(CALIBRATION_SIZES)
    assert plan == plan_forwards(plan.measured_ms)  # the plan is a function of the measurement alone


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    prompt=st.lists(st.integers(0, 5), min_size=1, max_size=20),
    n=st.integers(1, 16),
    pad=st.sampled_from([{1: 4, 2: 4, 3: 4}, {1: 8, 2: 8, 3: 8, 4: 8, 5: 8, 6: 8, 7: 8}, {2: 3}]),
    fixed_k=st.sampled_from([None, 0, 2, 5]),
)
def test_padded_decoding_is_lossless(
    seed: int, prompt: list[int], n: int, pad: dict[int, int], fixed_k: int | None, random_lm: Any,
    greedy_reference: Any,
) -> None:
    target = random_lm(seed, vocab_size=48, hidden=32, layers=2, head_scale=16.0)
    decoder = SpeculativeDecoder(target)
    sched = SchedulerConfig(fixed_k=fixed_k, verify_cost_ms={1: 10.0, 8: 10.0})
    plain = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=n))
    padded = decoder.generate(
        prompt, config=DecodeConfig(max_new_tokens=n, scheduler=sched, pad_to=pad), draft=NgramDraftSource()
    )
    assert padded.tokens == plain.tokens == greedy_reference(target, prompt, n)


def test_padding_leaves_no_trace_in_the_cache(random_lm: Any) -> None:
    target = random_lm(9, vocab_size=48, hidden=32, layers=2)
    decoder = SpeculativeDecoder(target)
    cache = new_cache(target)
    logits, hidden = decoder._forward([1, 2, 3], cache, {3: 8}, hidden=True)
    assert logits.shape[0] == 3 and cache_len(cache) == 3
    assert hidden is not None and hidden.shape[0] == 3
    fresh, fresh_hidden = decoder._forward([1, 2, 3], new_cache(target), None, hidden=True)
    assert (logits - fresh).abs().max().item() < 1e-4
    assert fresh_hidden is not None and (hidden - fresh_hidden).abs().max().item() < 1e-4


def test_pad_to_must_lengthen() -> None:
    with pytest.raises(ValueError, match="lengthen"):
        DecodeConfig(pad_to={4: 2}).validate()
