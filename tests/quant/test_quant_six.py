"""Q6_K panels with 6-bit codes (kind 16, blocks.pack_six): a 4-bit plane and a 2-bit plane per panel
group instead of a byte a code.

Checks: the weights are the gguf package's reference values bit for bit (in numpy, as embedding rows
and through the prefill GEMM); the layout inverts to the byte-code compact panels exactly and holds
6.625 bits a weight; the few-row products equal the byte-code compact panels' bit for bit at 1, 2, 4,
5, 6, 8 rows (and the others up to 13) and each row equals that row alone, with int16 activations and
with int8 ones (VNNI builds run 6-bit panels through vpdpbusd too; the int8 prefill rows likewise);
fused matrices equal their
parts; the switch (DSPARK_Q6K_6BIT, kernel_layout's ``six``) picks the layout, for Q6_K only; a whole tiny
model gives the same logits either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from quant_testlib import (
    T,
    assert_same_logits_in_both,
    model_to_gguf,
    random_qwen2,
    reference_values,
    tiny_config,
)
from test_quant_layout import _as_packed, _bits, _check_codes_hit_edges, _packed

from dspark_lsp.models.gguf_target import build_quantized_model
from dspark_lsp.quant import blocks
from dspark_lsp.quant.linear import (
    ENV_ACT8,
    ENV_SIX,
    SMALL_M,
    FusedProjections,
    QuantEmbedding,
    QuantLinear,
    act8_available,
    apply_act8,
    kernel_layout,
)


def test_six_bit_values_are_the_reference_bit_for_bit() -> None:
    n, k = 32, 1024
    raw, p = _packed(T.Q6_K, n, k, seed=71)
    _check_codes_hit_edges(raw, T.Q6_K, n, k)
    ref = reference_values(raw, T.Q6_K, n, k)
    c = blocks.interleave(p, compact=True, six=True)
    assert c.kind == blocks.SIX and c.compact and c.shift == 32
    codes = blocks.parse(raw, int(T.Q6_K), n, k).codes
    assert codes.min() == 0 and codes.max() == 63  # both planes' extremes are exercised
    assert np.array_equal(_bits(c.values()), _bits(ref))
    emb = QuantEmbedding(c)
    assert np.array_equal(_bits(emb(torch.arange(n))), _bits(ref))
    assert np.array_equal(_bits(emb(torch.tensor([n - 1, 3, 3, 17]))), _bits(ref[[n - 1, 3, 3, 17]]))
    eye = torch.eye(k)[: SMALL_M + 8]  # more rows than SMALL_M: the rebuilt-weights GEMM
    got = QuantLinear(c)(eye).T.contiguous()
    assert np.array_equal(got.numpy(), ref[:, : SMALL_M + 8])


def test_six_bit_layout_is_smaller_and_inverts() -> None:
    n, k = 16, 512
    _, p = _packed(T.Q6_K, n, k, seed=72)
    eight = blocks.interleave(p, compact=True)
    six = blocks.interleave(p, compact=True, six=True)
    assert six.nbytes * 8 / (n * k) == 6 + 8 / 16 + 32 / 256
    back = blocks.unpack_six(six)
    assert back.kind == eight.kind and back.shift == eight.shift
    for a, b in ((back.codes, eight.codes), (back.scale, eight.scale)):
        assert a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_six_bit_needs_compact_q6k() -> None:
    _, q4 = _packed(T.Q4_K, 16, 512, seed=73)
    with pytest.raises(ValueError, match="6-bit"):
        blocks.interleave(q4, compact=True, six=True)
    _, q6 = _packed(T.Q6_K, 16, 512, seed=74)
    with pytest.raises(ValueError, match="6-bit"):
        blocks.interleave(q6, six=True)
    assert kernel_layout(q4, six=True).kind == 14  # not Q6_K: the switch does not apply


def test_switch_picks_the_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    _, p = _packed(T.Q6_K, 24, 512, seed=75)
    assert kernel_layout(p, six=True).kind == blocks.SIX
    assert kernel_layout(p, six=False).kind == 18
    assert kernel_layout(p, compact=False, six=True).kind == 18 and not kernel_layout(p, compact=False).compact
    monkeypatch.setenv(ENV_SIX, "1")
    assert kernel_layout(p).kind == blocks.SIX
    monkeypatch.setenv(ENV_SIX, "0")
    assert kernel_layout(p).kind == 18
    # auto (the default): 6 bits where the int8 products run them (VNNI builds), byte codes elsewhere
    monkeypatch.delenv(ENV_SIX)
    monkeypatch.setenv(ENV_ACT8, "1")  # the product's default (the test suite runs with int16)
    vnni = act8_available() and bool(torch.ops.dspark_q.act8_vnni())
    assert (kernel_layout(p).kind == blocks.SIX) == vnni
    monkeypatch.setenv(ENV_ACT8, "0")  # int16 products: byte codes
    assert kernel_layout(p).kind == 18


def _pair(n: int, k: int, seed: int) -> tuple[QuantLinear, QuantLinear]:
    _, p = _packed(T.Q6_K, n, k, seed)
    bias = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    return QuantLinear(blocks.interleave(p, compact=True), bias), QuantLinear(blocks.interleave(p, True, True), bias)


@pytest.fixture(params=["int16", "int8"])
def activations(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both activation paths (process-wide switch), int16 left on afterwards."""
    if request.param == "int8" and not act8_available():
        pytest.skip("this kernel build has no int8 products")
    assert apply_act8(request.param == "int8") == (request.param == "int8")
    yield request.param
    apply_act8(False)


def test_six_bit_products_equal_byte_code_panels_at_every_verify_width(activations: str) -> None:
    old, new = _pair(48, 1536, seed=76)
    assert old.kind == 18 and new.kind == blocks.SIX
    x = torch.randn(13, 1536, generator=torch.Generator().manual_seed(4)) * 3
    x[2, :32] = 0.0
    alone = torch.cat([new(x[i : i + 1]) for i in range(13)])
    assert torch.equal(alone, torch.cat([old(x[i : i + 1]) for i in range(13)]))
    for m in (1, 2, 4, 5, 6, 8, 3, 7, 9, 12, 13):
        got = new(x[:m])
        assert torch.equal(got, old(x[:m])), f"M={m}: 6-bit panels differ from the byte-code ones"
        assert torch.equal(got, alone[:m]), f"M={m}: a row depends on the batch"
        assert torch.equal(new(x[13 - m :]), alone[13 - m :]), f"M={m} (tail)"


@pytest.mark.parametrize("int8_rows", [0, 16])
def test_six_bit_prefill_equals_byte_code_panels(activations: str, int8_rows: int) -> None:
    old, new = _pair(72, 512, seed=77)
    x = torch.randn(SMALL_M + 9, 512, generator=torch.Generator().manual_seed(5))
    before = int(torch.ops.dspark_q.set_prefill_int8(int8_rows))
    try:
        assert torch.equal(new(x), old(x))
    finally:
        torch.ops.dspark_q.set_prefill_int8(before)


def test_fused_six_bit_matrices_equal_their_parts() -> None:
    parts = [_packed(T.Q6_K, n, 512, seed=80 + n)[1] for n in (16, 8, 24)]
    fused = blocks.concat_rows([blocks.interleave(p, True, True) for p in parts])
    assert fused is not None and fused.kind == blocks.SIX
    want = blocks.interleave(blocks.concat_rows(parts), True, True)  # type: ignore[arg-type]
    assert np.array_equal(fused.codes.reshape(-1), want.codes.reshape(-1))
    assert np.array_equal(fused.scale, want.scale)
    group = FusedProjections(QuantLinear(fused), [16, 8, 24])
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(9))
    for i, p in enumerate(parts):
        assert torch.equal(group.part(i, x), QuantLinear(blocks.interleave(p, compact=True))(x))


def test_tiny_model_gives_the_same_logits_with_six_bit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(vocab=256, hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, tie=True)
    source = random_qwen2(6, config)
    types = {"token_embd.weight": T.Q6_K}
    for i in range(2):
        types.update({f"blk.{i}.{r}.weight": T.Q4_K for r in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up")})
        types.update({f"blk.{i}.attn_v.weight": T.Q6_K, f"blk.{i}.ffn_down.weight": T.Q6_K})
    path = tmp_path / "tiny-six.gguf"
    model_to_gguf(path, source, types, seed=6)
    monkeypatch.setenv(ENV_SIX, "0")
    old, old_report = build_quantized_model(path, config)
    monkeypatch.setenv(ENV_SIX, "1")
    new, new_report = build_quantized_model(path, config)
    assert _as_packed(old.lm_head).kind == 18 and _as_packed(new.lm_head).kind == blocks.SIX
    assert new_report.weight_bytes < old_report.weight_bytes
    assert_same_logits_in_both(old, new, seed=3)
