"""The compact K-quant panels (integer sub-block scales + per-256 factors, blocks.interleave(compact=True)).

Checks: every weight decodes to the gguf package's reference value bit for bit (edge scale codes
included), in numpy and through the kernel (embedding rows, the prefill GEMM path); the few-row products
equal the fp32-scale panels' bit for bit at every row count the decode and verify use, and a row's result
does not depend on the batch; the layout is what the loader picks by default and DSPARK_COMPACT_SCALES=0
restores the fp32 scales; a whole tiny model gives the same logits either way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from quant_testlib import T, model_to_gguf, random_blocks, random_qwen2, reference_values, tiny_config

from dspark_lsp.engine import kv
from dspark_lsp.models.gguf_target import build_quantized_model
from dspark_lsp.quant import blocks
from dspark_lsp.quant.build import KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import (
    ENV_COMPACT,
    ENV_PANELS,
    SMALL_M,
    FusedProjections,
    QuantEmbedding,
    QuantLinear,
    kernel_layout,
)

try:
    load_kernel()
except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
    pytest.skip(f"the quantized kernel is unavailable here: {exc}", allow_module_level=True)

if not torch.ops.dspark_q.panels():  # pragma: no cover - x86 without AVX2
    pytest.skip("this kernel build has no panel products", allow_module_level=True)

K_TYPES = (T.Q4_K, T.Q5_K, T.Q6_K)
IDS = [t.name for t in K_TYPES]


def _edge_blocks(qtype: T, n: int, k: int, seed: int) -> np.ndarray:
    """Random blocks with the sub-block scale (and min) codes forced to their extremes in some blocks:
    Q4_K / Q5_K codes 0 and 63 (all twelve scale bytes 0x00 or 0xFF), Q6_K scales -128, 0 and 127."""
    rng = np.random.default_rng(seed)
    raw = random_blocks(qtype, n, k, rng, special=True)
    size = 144 if qtype == T.Q4_K else 176 if qtype == T.Q5_K else 210
    b = raw.reshape(-1, size)
    nb = b.shape[0]
    assert nb >= 8
    if qtype == T.Q6_K:
        for i, v in enumerate((-128, 0, 127)):
            b[i::4, 192:208] = np.uint8(v & 0xFF)
        b[3::8, 192:200] = np.uint8(127)  # mixed: one half of the block at the top, the other random
    else:
        b[0::4, 4:16] = 0x00  # every scale and min code 0
        b[1::4, 4:16] = 0xFF  # every scale and min code 63
        b[2::8, 4:8] = 0xFF  # scale codes 0-3 at 63 (their 6 low bits), the rest random
    return raw


def _bits(a: np.ndarray | torch.Tensor) -> np.ndarray:
    arr = a.numpy() if isinstance(a, torch.Tensor) else a
    return np.ascontiguousarray(arr, np.float32).view(np.uint32)


def _packed(qtype: T, n: int, k: int, seed: int) -> tuple[np.ndarray, blocks.Packed]:
    raw = _edge_blocks(qtype, n, k, seed)
    return raw, blocks.pack_tensor(raw, int(qtype), n, k)


def _check_codes_hit_edges(raw: np.ndarray, qtype: T, n: int, k: int) -> None:
    sub = blocks.parse(raw, int(qtype), n, k).sub
    assert sub is not None
    if qtype == T.Q6_K:
        assert {-128, 0, 127} <= set(np.unique(sub.sc).tolist())
    else:
        assert sub.mn is not None
        for codes in (sub.sc, sub.mn):
            assert codes.min() == 0 and codes.max() == 63


@pytest.mark.parametrize("qtype", K_TYPES, ids=IDS)
def test_compact_values_are_the_reference_bit_for_bit(qtype: T) -> None:
    n, k = 32, 1024
    raw, p = _packed(qtype, n, k, seed=10 + int(qtype))
    _check_codes_hit_edges(raw, qtype, n, k)
    ref = reference_values(raw, qtype, n, k)
    c = blocks.interleave(p, compact=True)
    assert c.compact and c.kind == p.kind + 10
    assert np.array_equal(_bits(c.values()), _bits(ref))
    # through the kernel: embedding rows (expand_panel) and the prefill GEMM (x = identity rows)
    emb = QuantEmbedding(c)
    assert np.array_equal(_bits(emb(torch.arange(n))), _bits(ref))
    assert np.array_equal(_bits(emb(torch.tensor([n - 1, 3, 3, 17]))), _bits(ref[[n - 1, 3, 3, 17]]))
    lin = QuantLinear(c)
    eye = torch.eye(k)[: SMALL_M + 8]  # more rows than SMALL_M: the rebuilt-weights GEMM
    got = lin(eye).T.contiguous()  # [n, rows]: weight (i, j) for j < rows, exactly (x is one-hot; the
    assert np.array_equal(got.numpy(), ref[:, : SMALL_M + 8])  # sum's zero terms turn a -0 weight into +0)


@pytest.mark.parametrize("qtype", K_TYPES, ids=IDS)
def test_compact_layout_is_smaller_and_inverts(qtype: T) -> None:
    n, k = 16, 512
    _, p = _packed(qtype, n, k, seed=20 + int(qtype))
    c = blocks.interleave(p, compact=True)
    # bits a weight: codes (4 or 8), 8-bit sub-block scales (and mins), fp32 factors per 256
    want = {T.Q4_K: 4 + 8 / 32 + 8 / 32 + 64 / 256, T.Q5_K: 8 + 0.5 + 0.25, T.Q6_K: 8 + 8 / 16 + 32 / 256}[qtype]
    assert c.nbytes * 8 / (n * k) == want
    assert c.nbytes < blocks.interleave(p).nbytes
    back = blocks.deinterleave(c)
    assert back.kind == p.kind and back.sub is not None and p.sub is not None
    for a, b in ((back.codes, p.codes), (back.scale, p.scale), (back.off, p.off), (back.sub.sc, p.sub.sc),
                 (back.sub.d, p.sub.d)):
        assert a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_compact_needs_k_quant_scales_and_whole_panels() -> None:
    rng = np.random.default_rng(1)
    q8 = blocks.pack_tensor(random_blocks(T.Q8_0, 16, 256, rng), int(T.Q8_0), 16, 256)
    assert not blocks.can_compact(q8)  # no sub-block scales: keeps fp32 scales per group
    with pytest.raises(ValueError, match="compact"):
        blocks.interleave(q8, compact=True)
    assert not blocks.can_compact(blocks.pack_tensor(random_blocks(T.Q4_K, 12, 256, rng), int(T.Q4_K), 12, 256))
    assert kernel_layout(q8).kind == 18 and not kernel_layout(q8).compact


@pytest.mark.parametrize("qtype", K_TYPES, ids=IDS)
def test_kernel_layout_picks_compact_unless_switched_off(qtype: T, monkeypatch: pytest.MonkeyPatch) -> None:
    _, p = _packed(qtype, 24, 512, seed=30 + int(qtype))
    monkeypatch.delenv(ENV_COMPACT, raising=False)
    assert kernel_layout(p).compact
    assert not kernel_layout(p, compact=False).compact
    monkeypatch.setenv(ENV_COMPACT, "0")
    assert not kernel_layout(p).compact and kernel_layout(p).kind == p.kind + 10
    assert kernel_layout(p, compact=True).compact
    monkeypatch.setenv(ENV_PANELS, "0")
    assert kernel_layout(p, compact=True).kind == p.kind  # no panels, no compact panels


def _linears(qtype: T, n: int, k: int, seed: int) -> tuple[blocks.Packed, QuantLinear, QuantLinear]:
    _, p = _packed(qtype, n, k, seed)
    bias = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    old = QuantLinear(blocks.interleave(p), bias)
    new = QuantLinear(blocks.interleave(p, compact=True), bias)
    assert not blocks.interleave(p).compact
    return p, old, new


@pytest.mark.parametrize("qtype", K_TYPES, ids=IDS)
def test_compact_products_equal_fp32_scale_panels_at_every_verify_width(qtype: T) -> None:
    """1, 2, 4, 5, 6, 8 rows (and the rest up to 12 and a pass remainder): the same bits as the fp32-scale
    panels, and every row the same as that row alone (batch invariance)."""
    _, old, new = _linears(qtype, 48, 1536, seed=40 + int(qtype))
    x = torch.randn(13, 1536, generator=torch.Generator().manual_seed(4)) * 3
    x[2, :32] = 0.0  # an all-zero activation group (its int16 scale is 0)
    alone = torch.cat([new(x[i : i + 1]) for i in range(13)])
    assert torch.equal(alone, torch.cat([old(x[i : i + 1]) for i in range(13)]))
    for m in (1, 2, 4, 5, 6, 8, 3, 7, 9, 12, 13):
        got = new(x[:m])
        assert torch.equal(got, old(x[:m])), f"M={m}: compact differs from the fp32-scale panels"
        assert torch.equal(got, alone[:m]), f"M={m}: a row depends on the batch"
        assert torch.equal(new(x[13 - m :]), alone[13 - m :]), f"M={m} (tail)"


@pytest.mark.parametrize("qtype", K_TYPES, ids=IDS)
def test_compact_prefill_gemm_equals_fp32_scale_panels(qtype: T) -> None:
    _, old, new = _linears(qtype, 72, 512, seed=50 + int(qtype))
    x = torch.randn(SMALL_M + 9, 512, generator=torch.Generator().manual_seed(5))
    assert torch.equal(new(x), old(x))


def test_compact_results_do_not_depend_on_thread_count() -> None:
    _, _, new = _linears(T.Q4_K, 304, 512, seed=3)
    x = torch.randn(6, 512, generator=torch.Generator().manual_seed(7))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = new(x)
        torch.set_num_threads(max(2, threads))
        many = new(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


@pytest.mark.parametrize("qtype", K_TYPES, ids=IDS)
def test_fused_compact_matrices_equal_their_parts(qtype: T) -> None:
    """q/k/v and gate/up fuse after the load laid each out: stacked compact panels are the compact panels
    of the stacked matrix, and each part's columns are its own product's."""
    parts = [_packed(qtype, n, 512, seed=60 + n)[1] for n in (16, 8, 24)]
    fused = blocks.concat_rows([blocks.interleave(p, compact=True) for p in parts])
    assert fused is not None and fused.compact
    want = blocks.interleave(blocks.concat_rows(parts), compact=True)  # type: ignore[arg-type]
    for a, b in ((fused.codes, want.codes), (fused.scale, want.scale), (fused.off, want.off)):
        assert np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))
    # a compact part and an fp32-scale part do not stack (different layouts): each keeps its own call
    assert blocks.concat_rows([blocks.interleave(parts[0], compact=True), blocks.interleave(parts[1])]) is None
    group = FusedProjections(QuantLinear(fused), [16, 8, 24])
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(9))
    for i, p in enumerate(parts):
        assert torch.equal(group.part(i, x), QuantLinear(blocks.interleave(p, compact=True))(x))


# ------------------------------------------------------------------------------- a whole tiny model
def _tiny_gguf(tmp_path: Path) -> tuple[Path, object]:
    config = tiny_config(vocab=256, hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, tie=True)
    source = random_qwen2(5, config)
    types = {"token_embd.weight": T.Q6_K}
    for i in range(2):
        types.update({f"blk.{i}.{r}.weight": T.Q4_K for r in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up")})
        types.update({f"blk.{i}.attn_v.weight": T.Q6_K if i == 0 else T.Q4_K, f"blk.{i}.ffn_down.weight": T.Q6_K})
    path = tmp_path / "tiny-k.gguf"
    model_to_gguf(path, source, types, seed=5)
    return path, config


def test_tiny_model_gives_the_same_logits_in_both_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, config = _tiny_gguf(tmp_path)
    monkeypatch.setenv(ENV_COMPACT, "0")
    old, old_report = build_quantized_model(path, config)
    monkeypatch.delenv(ENV_COMPACT)
    new, new_report = build_quantized_model(path, config)
    assert not _as_packed(old.lm_head).compact and _as_packed(new.lm_head).compact
    assert new_report.weight_bytes < old_report.weight_bytes
    ids = [int(t) for t in np.random.default_rng(2).integers(0, 256, 40)]
    models = (old, new)
    with torch.inference_mode():
        caches = [kv.new_cache(m) for m in models]
        pre = [kv.forward(m, ids[:20], c) for m, c in zip(models, caches, strict=True)]
        assert torch.equal(pre[0], pre[1])  # prefill (the GEMM path)
        for width in (1, 2, 4, 5, 6, 8):
            step = ids[20 : 20 + width]
            outs = [kv.forward(m, step, c) for m, c in zip(models, caches, strict=True)]
            assert torch.equal(outs[0], outs[1]), f"{width}-token forward differs between layouts"
            for c in caches:
                kv.crop(c, 20)


def _as_packed(lin: QuantLinear) -> blocks.Packed:
    """The layout fields of a QuantLinear, enough for Packed.compact."""
    n, k = lin.out_features, lin.in_features
    return blocks.Packed(lin.kind, lin.codes.numpy(), lin.scale.numpy(), lin.off.numpy(), lin.shift, n, k,
                         lin.source_type)
