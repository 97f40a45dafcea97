"""The panel layout (blocks.interleave, qkernel.cpp "Panel layout"): 8 weight rows per register.

The same codes, scales and offsets as the row-major layout, reordered at load time so that decode and
verify products sum each weight row's groups in its own lane. Held to the row-major layout's values bit
for bit (which test_quant_blocks holds to the gguf package), to the dense reference like the row-major
products, and to the batch invariance that makes speculative verification equal one-token decoding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quant_testlib import K_QUANTS, SUPPORTED, T, random_blocks
from test_quant_kernel import assert_close_to_reference

from dspark_lsp.quant import blocks
from dspark_lsp.quant.build import KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import ENV_PANELS, SMALL_M, QuantEmbedding, QuantLinear, kernel_layout

try:
    load_kernel()
except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
    pytest.skip(f"the quantized kernel is unavailable here: {exc}", allow_module_level=True)

if not torch.ops.dspark_q.panels():  # pragma: no cover - x86 without AVX2
    pytest.skip("this kernel build has no panel products", allow_module_level=True)

IDS = [t.name for t in SUPPORTED]


def _packed(qtype: T, n: int, seed: int, scale: float = 0.05) -> blocks.Packed:
    k = 512 if qtype in K_QUANTS else 160  # 160: five groups
    raw = random_blocks(qtype, n, k, np.random.default_rng(seed), scale=scale)
    return blocks.pack_tensor(raw, int(qtype), n, k)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_interleave_keeps_every_value_and_inverts(qtype: T) -> None:
    p = _packed(qtype, 24, seed=int(qtype))
    il = blocks.interleave(p)
    assert il.kind == p.kind + 10 and il.codes.nbytes == p.codes.nbytes and il.nbytes == p.nbytes
    assert not np.array_equal(il.codes, p.codes)  # reordered, not copied
    assert np.array_equal(il.values(), p.values())
    back = blocks.deinterleave(il)
    assert back.kind == p.kind
    for a, b in ((back.codes, p.codes), (back.scale, p.scale), (back.off, p.off)):
        assert a.shape == b.shape and np.array_equal(a, b)


def test_interleave_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(ValueError, match="rows % 8"):
        blocks.interleave(_packed(T.Q8_0, 12, seed=1))
    with pytest.raises(ValueError, match="kind 18"):
        blocks.interleave(blocks.interleave(_packed(T.Q8_0, 16, seed=1)))


def test_quant_linear_takes_panels_where_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    assert QuantLinear(_packed(T.Q5_0, 48, seed=2)).kind == 18
    assert QuantLinear(_packed(T.Q4_K, 48, seed=2)).kind == 14
    assert QuantLinear(_packed(T.Q5_0, 45, seed=2)).kind == 8  # not a multiple of 8 rows: row-major
    monkeypatch.setenv(ENV_PANELS, "0")
    assert QuantLinear(_packed(T.Q5_0, 48, seed=2)).kind == 8
    assert kernel_layout(_packed(T.Q4_K, 48, seed=2)).kind == 4


def _pair(qtype: T, n: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[blocks.Packed, QuantLinear, QuantLinear]:
    p = _packed(qtype, n, seed)
    bias = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    monkeypatch.setenv(ENV_PANELS, "0")
    rows = QuantLinear(p, bias)
    monkeypatch.setenv(ENV_PANELS, "1")
    panels = QuantLinear(p, bias)
    assert (rows.kind, panels.kind) == (p.kind, p.kind + 10)
    return p, rows, panels


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_panel_products_match_the_dense_reference(qtype: T, monkeypatch: pytest.MonkeyPatch) -> None:
    p, rows, panels = _pair(qtype, 56, 60 + int(qtype), monkeypatch)
    x = torch.randn(11, p.k, generator=torch.Generator().manual_seed(3))
    y = panels(x)
    assert y.shape == (11, 56)
    assert_close_to_reference(y - panels.bias, x, p)
    # the row-major products round the same int16 activations: both stay within the same bound of each other
    assert_close_to_reference(rows(x) - rows.bias, x, p)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_panel_rows_do_not_depend_on_batch_size(qtype: T, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows run in passes of up to 8 with a remainder: M = 1..20 covers every pass and split."""
    _, _, lin = _pair(qtype, 40, 70 + int(qtype), monkeypatch)
    x = torch.randn(20, lin.in_features, generator=torch.Generator().manual_seed(5))
    alone = torch.cat([lin(x[i : i + 1]) for i in range(20)])
    for m in range(1, 21):
        assert torch.equal(lin(x[:m]), alone[:m]), f"M={m}"
        assert torch.equal(lin(x[20 - m :]), alone[20 - m :]), f"M={m} (tail)"
    assert torch.equal(lin(x.flip(0)), alone.flip(0))
    assert torch.equal(lin(x[[3, 3, 7, 0, 3, 19, 11, 2, 9]]), alone[[3, 3, 7, 0, 3, 19, 11, 2, 9]])
    big = torch.randn(SMALL_M, lin.in_features, generator=torch.Generator().manual_seed(6))
    assert torch.equal(lin(big)[SMALL_M - 5 :], lin(big[SMALL_M - 5 :]))


def test_panel_results_do_not_depend_on_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, lin = _pair(T.Q6_K, 304, 3, monkeypatch)
    x = torch.randn(6, 512, generator=torch.Generator().manual_seed(7))
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = lin(x)
        torch.set_num_threads(max(2, old))
        many = lin(x)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one, many)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_panel_gemm_path_rebuilds_the_same_weights(qtype: T, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many rows (prefill) rebuild the weights from the panels: the same fp32 values, so the same GEMM
    result as the row-major layout, bit for bit."""
    p, rows, panels = _pair(qtype, 72, 80 + int(qtype), monkeypatch)
    x = torch.randn(SMALL_M + 9, p.k, generator=torch.Generator().manual_seed(8))
    assert torch.equal(panels(x), rows(x))
    assert_close_to_reference(panels(x) - panels.bias, x, p, int16_x=False)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_embedding_rows_from_panels_are_the_packed_values(qtype: T) -> None:
    p = _packed(qtype, 40, seed=90 + int(qtype), scale=2.0)
    emb = QuantEmbedding(blocks.interleave(p))
    values = torch.from_numpy(p.values())
    ids = torch.tensor([[0, 39, 7, 7], [13, 2, 39, 8]])
    assert torch.equal(emb(ids), values[ids])
    assert torch.equal(emb(torch.arange(40)), values)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q5_0, T.Q6_K, T.Q4_1], ids=lambda t: t.name)
def test_fusing_panel_matrices_stacks_their_panels(qtype: T) -> None:
    """q/k/v and gate/up fuse after the load put each in panels: stacking panel matrices by rows is the
    panel layout of the stacked matrix (each part's panels are whole, contiguous blocks)."""
    parts = [_packed(qtype, n, seed=100 + n) for n in (16, 8, 24)]
    fused = blocks.concat_rows([blocks.interleave(p) for p in parts])
    assert fused is not None and fused.kind == parts[0].kind + 10
    want = blocks.interleave(blocks.concat_rows(parts))  # type: ignore[arg-type]
    for a, b in ((fused.codes, want.codes), (fused.scale, want.scale), (fused.off, want.off)):
        assert np.array_equal(a.reshape(-1), b.reshape(-1))
    # a panel part and a row-major one do not fuse (their layouts differ): each keeps its own call
    assert blocks.concat_rows([blocks.interleave(parts[0]), parts[1]]) is None
