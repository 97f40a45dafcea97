"""Pre-packed CPU linears (models.packing): same numbers as nn.Linear up to float rounding, lossless
speculative decoding on a packed target, and clear errors where packing is impossible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.kv import crop, forward, new_cache
from dspark_lsp.errors import ModelError
from dspark_lsp.models import packing
from dspark_lsp.models.packing import PackedLinear, is_packed, pack_linears

pytestmark = pytest.mark.skipif(not packing.packing_available(), reason="this torch build has no oneDNN")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 37])
def test_packed_linear_matches_nn_linear(rows: int, bias: bool) -> None:
    torch.manual_seed(rows)
    lin = torch.nn.Linear(48, 80, bias=bias)
    packed = PackedLinear(lin)
    x = torch.randn(2, rows, 48)
    with torch.no_grad():
        want = lin(x)
        got = packed(x)
    assert got.shape == want.shape == (2, rows, 80)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_pack_replaces_every_linear_and_keeps_logits(random_lm: Any) -> None:
    model = random_lm(3, vocab_size=64, hidden=32, layers=2, heads=4, kv_heads=2)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    ids = list(range(1, 30))
    cache = new_cache(model)
    want = forward(model, ids, cache)
    assert n_linear == pack_linears(model, "auto") > 0
    assert is_packed(model)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    got = forward(model, ids, new_cache(model))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_off_leaves_the_model_alone(random_lm: Any) -> None:
    model = random_lm(4)
    assert pack_linears(model, "off") == 0
    assert not is_packed(model)


def test_unknown_mode_and_impossible_on_are_errors(random_lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = random_lm(5)
    with pytest.raises(ValueError, match="pack must be one of"):
        pack_linears(model, "sometimes")
    half = random_lm(6).to(torch.float16)
    with pytest.raises(ValueError, match="only fp32/bf16"):
        pack_linears(half, "on")
    assert pack_linears(half, "auto") == 0  # auto quietly skips what it cannot pack
    monkeypatch.setattr(packing, "packing_available", lambda: False)
    assert pack_linears(model, "auto") == 0
    with pytest.raises(ValueError, match="oneDNN"):
        pack_linears(model, "on")


def test_loader_packs_by_default_and_reports_bad_mode(tiny_models: tuple[Path, Path]) -> None:
    from dspark_lsp.models.loader import load_causal_lm

    packed, _ = load_causal_lm(str(tiny_models[0]), device="cpu", dtype="float32")
    plain, _ = load_causal_lm(str(tiny_models[0]), device="cpu", dtype="float32", pack="off")
    assert is_packed(packed) and not is_packed(plain)
    ids = list(range(5, 40))
    a = forward(packed, ids, new_cache(packed))
    b = forward(plain, ids, new_cache(plain))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ModelError, match="pack"):
        load_causal_lm(str(tiny_models[0]), device="cpu", dtype="float16", pack="on")


def test_packed_kv_rollback_equals_fresh(random_lm: Any) -> None:
    model = random_lm(7, hidden=32, layers=2, heads=4, kv_heads=2)
    pack_linears(model, "on")
    ids = [3, 9, 1, 4, 4, 20, 7, 7, 2, 11, 5]
    cache = new_cache(model)
    forward(model, ids[:6], cache)
    forward(model, [1, 2, 3, 4], cache)  # a rejected draft
    crop(cache, 6)
    resumed = forward(model, ids[6:], cache)
    fresh = forward(model, ids, new_cache(model))[6:]
    torch.testing.assert_close(resumed, fresh, rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    prompt=st.lists(st.integers(0, 5), min_size=2, max_size=20),
    k=st.integers(1, 6),
    n=st.integers(1, 20),
)
def test_speculative_on_a_packed_target_is_lossless(
    seed: int, prompt: list[int], k: int, n: int, random_lm: Any, greedy_reference: Any
) -> None:
    target = random_lm(seed, vocab_size=48, hidden=32, layers=2, head_scale=16.0)
    pack_linears(target, "on")
    decoder = SpeculativeDecoder(target)
    alone = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=n))
    spec = decoder.generate(
        prompt,
        config=DecodeConfig(max_new_tokens=n, scheduler=SchedulerConfig(fixed_k=k)),
        draft=NgramDraftSource(max_ngram=2),
    )
    assert spec.tokens == alone.tokens == greedy_reference(target, prompt, n)
