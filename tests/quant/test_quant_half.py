"""fp16 scales for the plain types' panels (Q8_0, Q5_0, Q4_0: blocks.half_scales, DSPARK_HALF_SCALES).

Checks: the weights are the gguf package's reference values bit for bit (numpy, embedding rows, the
prefill GEMM) with subnormal and extreme fp16 scales included; the few-row products equal the fp32-scale
panels' bit for bit at 1, 2, 4, 5, 6, 8 rows (and the others up to 13) and each row equals that row
alone; only fp16-exact scales of those types qualify; the switch picks the layout; a whole tiny model
gives the same logits either way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from quant_testlib import (
    T,
    assert_same_logits_in_both,
    model_to_gguf,
    random_blocks,
    random_qwen2,
    reference_values,
    tiny_config,
)
from test_quant_layout import _bits

from dspark_lsp.models.gguf_target import build_quantized_model
from dspark_lsp.quant import blocks
from dspark_lsp.quant.linear import ENV_HALF, SMALL_M, QuantEmbedding, QuantLinear, kernel_layout

if not torch.ops.dspark_q.half_scales():  # pragma: no cover - an x86 CPU without F16C
    pytest.skip("this kernel build has no fp16 scales", allow_module_level=True)

PLAIN = (T.Q8_0, T.Q5_0, T.Q4_0)
IDS = [t.name for t in PLAIN]


def _raw(qtype: T, n: int, k: int, seed: int) -> np.ndarray:
    raw = random_blocks(qtype, n, k, np.random.default_rng(seed), special=True)
    b = raw.reshape(-1, {T.Q8_0: 34, T.Q5_0: 22, T.Q4_0: 18}[qtype])
    edges = np.array([6e-8, -6e-8, 6.1e-5, 65504.0, -65504.0, 0.0], np.float16)  # subnormal, normal, max
    b[: len(edges), 0:2] = edges.view(np.uint8).reshape(-1, 2)
    return raw


def _pair(qtype: T, n: int, k: int, seed: int) -> tuple[np.ndarray, blocks.Packed, blocks.Packed]:
    raw = _raw(qtype, n, k, seed)
    p = blocks.interleave(blocks.pack_tensor(raw, int(qtype), n, k))
    return raw, p, blocks.half_scales(p)


@pytest.mark.parametrize("qtype", PLAIN, ids=IDS)
def test_half_scale_values_are_the_reference_bit_for_bit(qtype: T) -> None:
    n, k = 32, 512
    raw, p, h = _pair(qtype, n, k, seed=90 + int(qtype))
    assert h.scale.dtype == np.float16 and h.nbytes < p.nbytes
    assert h.nbytes * 8 / (n * k) == {T.Q8_0: 8.5, T.Q5_0: 8.5, T.Q4_0: 4.5}[qtype]
    ref = reference_values(raw, qtype, n, k)
    assert np.array_equal(_bits(h.values()), _bits(ref))
    emb = QuantEmbedding(h)
    assert np.array_equal(_bits(emb(torch.arange(n))), _bits(ref))
    eye = torch.eye(k)[: SMALL_M + 8]
    assert np.array_equal(QuantLinear(h)(eye).T.contiguous().numpy(), ref[:, : SMALL_M + 8])


@pytest.mark.parametrize("qtype", PLAIN, ids=IDS)
def test_half_scale_products_equal_fp32_scale_panels_at_every_verify_width(qtype: T) -> None:
    _, p, h = _pair(qtype, 48, 1536, seed=100 + int(qtype))
    bias = torch.randn(48, generator=torch.Generator().manual_seed(1))
    old, new = QuantLinear(p, bias), QuantLinear(h, bias)
    assert new.scale.dtype == torch.float16 and old.scale.dtype == torch.float32
    x = torch.randn(13, 1536, generator=torch.Generator().manual_seed(4)) * 3
    x[2, :32] = 0.0
    alone = torch.cat([new(x[i : i + 1]) for i in range(13)])
    assert torch.equal(alone, torch.cat([old(x[i : i + 1]) for i in range(13)]))
    for m in (1, 2, 4, 5, 6, 8, 3, 7, 9, 12, 13):
        got = new(x[:m])
        assert torch.equal(got, old(x[:m])), f"M={m}: fp16 scales differ from fp32 ones"
        assert torch.equal(got, alone[:m]), f"M={m}: a row depends on the batch"
    xl = torch.randn(SMALL_M + 9, 1536, generator=torch.Generator().manual_seed(5))
    assert torch.equal(new(xl), old(xl))  # the prefill GEMM path


def test_only_exact_plain_type_scales_qualify(monkeypatch: pytest.MonkeyPatch) -> None:
    _, p, _ = _pair(T.Q8_0, 16, 256, seed=7)
    assert blocks.can_half(p)
    inexact = blocks.Packed(p.kind, p.codes, p.scale + np.float32(1e-9), p.off, p.shift, p.n, p.k, p.source_type)
    assert not blocks.can_half(inexact)  # e.g. a requantized draft's fp32 scales
    q4k = blocks.interleave(blocks.pack_tensor(random_blocks(T.Q4_K, 16, 256, np.random.default_rng(2)),
                                               int(T.Q4_K), 16, 256))
    assert not blocks.can_half(q4k)  # offsets
    with pytest.raises(ValueError, match="fp16"):
        blocks.half_scales(q4k)
    row_major = blocks.pack_tensor(_raw(T.Q8_0, 16, 256, 8), int(T.Q8_0), 16, 256)
    assert kernel_layout(row_major, half=True).scale.dtype == np.float16
    assert kernel_layout(row_major, half=False).scale.dtype == np.float32
    monkeypatch.setenv(ENV_HALF, "1")
    assert kernel_layout(row_major).scale.dtype == np.float16
    monkeypatch.setenv(ENV_HALF, "0")
    assert kernel_layout(row_major).scale.dtype == np.float32


def test_tiny_model_gives_the_same_logits_with_half_scales(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(vocab=256, hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, tie=True)
    source = random_qwen2(7, config)
    types = {"token_embd.weight": T.Q8_0}
    for i in range(2):
        types.update({f"blk.{i}.{r}.weight": T.Q5_0 for r in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up")})
        types.update({f"blk.{i}.attn_v.weight": T.Q8_0, f"blk.{i}.ffn_down.weight": T.Q4_0})
    path = tmp_path / "tiny-half.gguf"
    model_to_gguf(path, source, types, seed=7)
    monkeypatch.setenv(ENV_HALF, "0")
    old, old_report = build_quantized_model(path, config)
    monkeypatch.setenv(ENV_HALF, "1")
    new, new_report = build_quantized_model(path, config)
    assert old.lm_head.scale.dtype == torch.float32 and new.lm_head.scale.dtype == torch.float16
    assert new_report.weight_bytes < old_report.weight_bytes
    assert_same_logits_in_both(old, new, seed=4)
