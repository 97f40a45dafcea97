"""The C++ decoder layer for layers whose q/k/v or gate/up did not fuse into one product.

The 1.5B's GGUF has v in Q6_K where q/k are Q4_K in 14 of its 28 layers: those layouts do not fuse, so
without this every layer ran through the Python loop (the native plan was all layers or none). A tiny
Qwen2 with the same mix in one layer (and gate/up unfused in the other) must plan natively for every
layer when unfused layers are allowed, run the C++ layer, agree with the Python layer loop to fp32
rounding (as the fused native layer does, tests/test_quant_model.py), and stay batch invariant: a
k-token verify forward's logits equal k one-token forwards' bit for bit (lossless speculation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from quant_testlib import T, model_to_gguf, random_qwen2, tiny_config

from dspark_lsp.engine import kv
from dspark_lsp.models.gguf_target import build_quantized_model
from dspark_lsp.models.lean_forward import LeanQwen2
from dspark_lsp.quant.build import KernelUnavailable, load_kernel

VOCAB = 320
# Decode rounding of the products' inputs compounds over layers (test_quant_model.QUANT_TOL's reason).
QUANT_TOL = {"atol": 2e-3, "rtol": 2e-3}
_ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
# Layer 0 as the 1.5B's odd layers: q/k Q4_K, v Q6_K (no fusion), gate/up fused. Layer 1: q/k/v fused,
# gate Q4_K and up Q6_K (no fusion).
_LAYERS = ((T.Q4_K, T.Q4_K, T.Q6_K, T.Q4_K, T.Q4_K, T.Q4_K, T.Q6_K),
           (T.Q4_K, T.Q4_K, T.Q4_K, T.Q6_K, T.Q4_K, T.Q6_K, T.Q4_K))


# 4 heads of 64 (the 0.5B's head size) and 2 of 128 (the 1.5B's): the C++ attention has a register-
# resident path for each of those sizes, beside its generic one.
@pytest.fixture(scope="module", params=[4, 2], ids=["head64", "head128"])
def models(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """The same GGUF built twice: with DSPARK_NATIVE_UNFUSED=0 (unfused layers on the Python path) and
    as by default (every layer native)."""
    try:
        load_kernel()
    except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
        pytest.skip(f"the quantized kernel is unavailable here: {exc}")
    # K-quants need rows of 256 values: hidden and intermediate sizes of 256.
    config = tiny_config(vocab=VOCAB, hidden=256, intermediate=256, heads=request.param, kv_heads=2, layers=2)
    types = {"token_embd.weight": T.Q8_0, "output.weight": T.Q6_K}
    for i, layer in enumerate(_LAYERS):
        types.update({f"blk.{i}.{role}.weight": t for role, t in zip(_ROLES, layer, strict=True)})
    path = Path(tmp_path_factory.mktemp("native-unfused")) / "model.gguf"
    model_to_gguf(path, random_qwen2(3, config), types, seed=3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DSPARK_NATIVE_UNFUSED", "0")
        python, _ = build_quantized_model(path, config)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DSPARK_NATIVE_UNFUSED", raising=False)
        native, _ = build_quantized_model(path, config)
    return python, native


def test_every_layer_plans_natively_with_unfused_parts(models: tuple[Any, Any]) -> None:
    python, native = models
    assert python.dspark_lean.native is None  # DSPARK_NATIVE_UNFUSED=0: unfused layers keep the Python loop
    plans = native.dspark_lean.native
    assert plans is not None and len(plans) == len(native.model.layers)
    # The mix really left these groups unfused (else this tests the fused op only).
    assert [(len(p.qkv), len(p.gate_up)) for p in plans] == [(3, 1), (1, 2)]
    # A forced plan on the default-built model agrees.
    forced = LeanQwen2(python, native_unfused=True).native
    assert forced is not None and [p.fused for p in forced] == [False, False]


def _count_native(model: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    lean = model.dspark_lean
    calls: list[int] = []
    real = lean._native_layers

    def spy(*args: Any) -> torch.Tensor:
        calls.append(args[1])  # the row count
        return real(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(lean, "_native_layers", spy)
    return calls


def test_native_unfused_agrees_with_the_python_layer_loop(models: tuple[Any, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill (native: <= 16 rows), then 1..8-token forwards, each model on its own cache: logits and
    every hidden state to fp32 rounding; the native model ran the C++ layer for each of them."""
    python, native = models
    calls = _count_native(native, monkeypatch)
    rng = np.random.default_rng(5)
    ids = [int(t) for t in rng.integers(0, VOCAB, 12 + sum(range(1, 9)))]
    caches = (kv.new_cache(python), kv.new_cache(native))
    spans = [(0, 12)]
    for k in range(1, 9):
        spans.append((spans[-1][1], spans[-1][1] + k))
    differs = False
    for lo, hi in spans:
        outs = []
        for model, cache in zip(models, caches, strict=True):
            with torch.inference_mode():
                outs.append(model(input_ids=torch.tensor([ids[lo:hi]]), cache=cache, use_cache=True,
                                  output_hidden_states=True))
        a, b = outs
        torch.testing.assert_close(b.logits, a.logits, **QUANT_TOL, msg=lambda m, s=(lo, hi): f"{s}: {m}")
        for x, y in zip(b.hidden_states, a.hidden_states, strict=True):
            torch.testing.assert_close(x, y, **QUANT_TOL)
        differs |= not torch.equal(a.logits, b.logits)
    assert calls == [hi - lo for lo, hi in spans]
    assert differs  # the C++ layer's own rounding shows somewhere: it, not the Python loop, ran


@pytest.mark.parametrize("prefix", [1, 12])
def test_native_unfused_verify_rows_equal_one_token_forwards_bitwise(models: tuple[Any, Any], prefix: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, native = models
    calls = _count_native(native, monkeypatch)
    rng = np.random.default_rng(7 + prefix)
    for k in (*range(1, 9), 12):  # 12 rows of 13-24 keys: four-key blocks and a remainder
        ids = [int(t) for t in rng.integers(0, VOCAB, prefix + k)]
        cache = kv.new_cache(native)
        kv.forward(native, ids[:prefix], cache)
        together = kv.forward(native, ids[prefix:], cache)
        kv.crop(cache, prefix)
        alone = torch.cat([kv.forward(native, [t], cache) for t in ids[prefix:]])
        assert together.shape == alone.shape == (k, VOCAB)
        assert torch.equal(together, alone), f"prefix {prefix}, k {k}"
    assert calls and all(1 <= c <= 12 for c in calls)
