"""The quantized kernel (qkernel.cpp via dspark_lsp.quant.linear): right values, batch invariance, lookups.

Every test holds the kernel to ``Packed.values()``, which test_quant_blocks holds to the gguf package's
own dequantization bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from quant_testlib import K_QUANTS, SUPPORTED, T, prefill_scratch_made_in_inference_mode, random_blocks

from dspark_lsp.quant import blocks
from dspark_lsp.quant.build import KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import SMALL_M, FusedProjections, ProjectionPart, QuantEmbedding, QuantLinear

try:
    load_kernel()  # the default cache root: compiled at most once per machine (~20 s), then cached
except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
    pytest.skip(f"the quantized kernel is unavailable here: {exc}", allow_module_level=True)

IDS = [t.name for t in SUPPORTED]


def _packed(qtype: T, n: int, k: int, seed: int, scale: float = 0.05) -> blocks.Packed:
    raw = random_blocks(qtype, n, k, np.random.default_rng(seed), scale=scale)
    return blocks.pack_tensor(raw, int(qtype), n, k)


def _k(qtype: T) -> int:
    return 512 if qtype in K_QUANTS else 160  # 160: five groups, not a power of two


def _magnitudes(p: blocks.Packed) -> torch.Tensor:
    """|scale * (code - shift)| + |offset| per weight: the sizes of the terms the kernel adds up (it may
    sum scale * (codes . x) and offset * sum(x) per group, so a weight near 0 does not mean small terms)."""
    mag = np.abs(dataclasses.replace(p, off=np.zeros(0, np.float32)).values())
    if p.off.size:
        mag = mag + np.repeat(np.abs(p.off.reshape(p.n, -1)), 32, axis=1)
    return torch.from_numpy(mag)


def assert_close_to_reference(y: torch.Tensor, x: torch.Tensor, p: blocks.Packed, rel: float = 1e-5,
                              int16_x: bool = True) -> None:
    """``y`` is ``x @ W.T`` (W = ``p.values()``) up to fp32 accumulation rounding: every element within
    ``rel`` of the sum of the magnitudes of its terms, plus — on the few-row path (``int16_x``), which
    rounds each group of 32 activations to int16 steps of absmax / 32767 — half a step (and a hair for the
    fp32 scaling) times each weight's code term. A wrong code, scale, offset or layout is off by a
    sizeable part of the magnitude sum; rounding is ~1e-7 of it, the int16 steps ~1e-5."""
    w = torch.from_numpy(p.values()).double()
    ref = x.double() @ w.T
    bound = rel * (x.double().abs() @ _magnitudes(p).double().T) + 1e-30
    if int16_x:
        step = x.double().abs().reshape(x.shape[0], -1, 32).amax(-1) / 32767  # [M, G]
        codes = np.abs(dataclasses.replace(p, off=np.zeros(0, np.float32)).values())
        bound = bound + 0.51 * torch.repeat_interleave(step, 32, dim=1) @ torch.from_numpy(codes).double().T
    err = (y.double() - ref).abs()
    worst = float((err / bound).max())
    assert worst <= 1.0, f"error {float(err.max()):.3g} is {worst:.3g}x the bound"


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_quant_linear_matches_dense_reference(qtype: T) -> None:
    n, k = 45, _k(qtype)  # 45 outputs: not a multiple of the kernel's 16-column thread grain
    packed = _packed(qtype, n, k, seed=int(qtype))
    bias = torch.randn(n, generator=torch.Generator().manual_seed(1))
    lin = QuantLinear(packed, bias)
    assert (lin.in_features, lin.out_features) == (k, n)
    x = torch.randn(7, k, generator=torch.Generator().manual_seed(2))
    y = lin(x)
    assert y.shape == (7, n) and y.dtype == torch.float32
    assert_close_to_reference(y - bias, x, packed)
    assert_close_to_reference(QuantLinear(packed)(x), x, packed)
    # Leading dims, other input dtypes and non-contiguous inputs behave like nn.Linear.
    x3 = torch.randn(2, 3, k, generator=torch.Generator().manual_seed(3))
    assert torch.equal(lin(x3), lin(x3.reshape(6, k)).reshape(2, 3, n))
    xt = torch.randn(k, 5, generator=torch.Generator().manual_seed(4)).T  # a transposed view
    assert not xt.is_contiguous()
    assert torch.equal(lin(xt), lin(xt.contiguous()))
    assert torch.equal(lin(x.double()), lin(x))
    assert lin(x[:0]).shape == (0, n)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_rows_do_not_depend_on_batch_size(qtype: T) -> None:
    """Batch invariance: a row's outputs are the same bits whether it runs alone or among M rows, at any
    position in the batch (the kernel runs rows in passes of a few, then a remainder: M = 1..12 covers
    every split)."""
    n, k = 37, _k(qtype)
    lin = QuantLinear(_packed(qtype, n, k, seed=10 + int(qtype)), torch.randn(n))
    x = torch.randn(12, k, generator=torch.Generator().manual_seed(5))
    alone = torch.cat([lin(x[i : i + 1]) for i in range(12)])
    for m in range(1, 13):
        assert torch.equal(lin(x[:m]), alone[:m]), f"M={m}"
        assert torch.equal(lin(x[12 - m :]), alone[12 - m :]), f"M={m} (tail)"
    assert torch.equal(lin(x.flip(0)), alone.flip(0))
    assert torch.equal(lin(x[[3, 3, 7, 0, 3]]), alone[[3, 3, 7, 0, 3]])
    # the same at the largest batch still on the batch-invariant path
    big = torch.randn(SMALL_M, k, generator=torch.Generator().manual_seed(6))
    assert torch.equal(lin(big)[SMALL_M - 5 :], lin(big[SMALL_M - 5 :]))


def test_results_do_not_depend_on_thread_count() -> None:
    lin = QuantLinear(_packed(T.Q6_K, 300, 512, seed=3))
    emb = QuantEmbedding(_packed(T.Q4_1, 300, 64, seed=4))
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(7))
    ids = torch.arange(300).flip(0)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (lin(x), emb(ids))
        torch.set_num_threads(max(2, old))
        many = (lin(x), emb(ids))
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_large_batches_use_the_gemm_path_and_stay_close(qtype: T) -> None:
    n, k = 70, _k(qtype)
    packed = _packed(qtype, n, k, seed=20 + int(qtype))
    x = torch.randn(SMALL_M + 9, k, generator=torch.Generator().manual_seed(8))
    y = QuantLinear(packed)(x)  # M > small_m: tiles of rebuilt rows through a GEMM
    assert y.shape == (SMALL_M + 9, n)
    assert_close_to_reference(y, x, packed, int16_x=False)  # fp32 activations there
    # small_m is a parameter: the same input both ways agrees to rounding.
    small = QuantLinear(packed, small_m=4)(x[:8])
    assert_close_to_reference(small, x[:8], packed, int16_x=False)
    assert_close_to_reference(QuantLinear(packed, small_m=64)(x), x, packed)


def test_gemm_path_with_several_weight_tiles() -> None:
    # K = 512 -> tiles of 1024 weight rows: 1100 rows take two tiles (the second one partial).
    packed = _packed(T.Q8_0, 1100, 512, seed=30)
    x = torch.randn(40, 512, generator=torch.Generator().manual_seed(9))
    assert_close_to_reference(QuantLinear(packed)(x), x, packed, int16_x=False)


@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_embedding_rows_are_the_packed_values(qtype: T) -> None:
    n, k = 50, _k(qtype)
    packed = _packed(qtype, n, k, seed=40 + int(qtype), scale=2.0)
    emb = QuantEmbedding(packed)
    values = torch.from_numpy(packed.values())
    ids = torch.tensor([[0, 49, 7, 7], [13, 2, 49, 0]])
    rows = emb(ids)
    assert rows.shape == (2, 4, k) and rows.dtype == torch.float32
    assert torch.equal(rows, values[ids])
    assert torch.equal(emb(torch.arange(n, dtype=torch.int32)), values)
    assert emb(torch.zeros(0, dtype=torch.long)).shape == (0, k)
    # transformers reads .weight for the dtype / device only
    assert emb.weight.dtype == torch.float32 and emb.weight.device.type == "cpu"


def test_out_of_range_ids_raise() -> None:
    emb = QuantEmbedding(_packed(T.Q8_0, 10, 64, seed=50))
    for bad in ([10], [0, 3, 11], [-1], [2**40]):
        with pytest.raises(RuntimeError, match="out of range"):
            emb(torch.tensor(bad))
    args = (emb.kind, emb.codes, emb.scale, emb.off, emb.shift, 64)
    with pytest.raises(RuntimeError, match=r"row id 10 out of range"):
        torch.ops.dspark_q.qrows(torch.tensor([10]), *args)


def test_bad_operands_raise() -> None:
    lin = QuantLinear(_packed(T.Q5_1, 8, 64, seed=60))
    with pytest.raises(RuntimeError, match="K must be a multiple of 32"):
        torch.ops.dspark_q.qmm(torch.randn(2, 48), lin.kind, lin.codes, lin.scale, lin.off, lin.shift, 32)
    with pytest.raises(RuntimeError, match="bad scale shape"):  # K of another matrix
        torch.ops.dspark_q.qmm(torch.randn(2, 96), lin.kind, lin.codes, lin.scale, lin.off, lin.shift, 32)
    with pytest.raises(RuntimeError, match="bad 8-bit codes"):
        torch.ops.dspark_q.qmm(torch.randn(2, 64), lin.kind, lin.codes[:-32], lin.scale, lin.off, lin.shift, 32)
    with pytest.raises(RuntimeError, match="bad offsets"):
        torch.ops.dspark_q.qmm(torch.randn(2, 64), lin.kind, lin.codes, lin.scale, lin.off[:-1], lin.shift, 32)
    with pytest.raises(RuntimeError, match="unknown code layout"):
        torch.ops.dspark_q.qmm(torch.randn(2, 64), 5, lin.codes, lin.scale, lin.off, lin.shift, 32)
    with pytest.raises(RuntimeError, match=r"x must be \[M, K\]"):
        torch.ops.dspark_q.qmm(torch.randn(64), lin.kind, lin.codes, lin.scale, lin.off, lin.shift, 32)


def _projection_set(types: tuple[T, ...], sizes: tuple[int, ...], k: int, seed: int):
    parts = [_packed(t, n, k, seed=seed + i) for i, (t, n) in enumerate(zip(types, sizes, strict=True))]
    biases = [torch.randn(n, generator=torch.Generator().manual_seed(seed + 10 + i)) for i, n in enumerate(sizes)]
    joined = blocks.concat_rows(parts)
    assert joined is not None
    group = FusedProjections(QuantLinear(joined, torch.cat(biases)), list(sizes))
    fused = [ProjectionPart(group, i) for i in range(len(sizes))]
    separate = [QuantLinear(p, b) for p, b in zip(parts, biases, strict=True)]
    return group, fused, separate


@pytest.mark.parametrize(
    "types",
    [(T.Q8_0, T.Q5_0, T.Q5_0), (T.Q4_1, T.Q4_K, T.Q4_1), (T.Q6_K, T.Q6_K), (T.Q4_0, T.Q4_0)],
    ids=lambda ts: "+".join(t.name for t in ts),
)
def test_fused_projection_parts_equal_separate_linears(types: tuple[T, ...]) -> None:
    sizes = (64, 32, 32)[: len(types)]
    group, fused, separate = _projection_set(types, sizes, 256, seed=70)
    assert [p.out_features for p in fused] == list(sizes)
    assert all(p.in_features == 256 for p in fused)
    gen = torch.Generator().manual_seed(11)
    h = torch.randn(1, 5, 256, generator=gen)
    # transformers' order: every part with the same tensor
    for part, lin in zip(fused, separate, strict=True):
        assert torch.equal(part(h), lin(h))
    assert group._memo["input"] is None and group._memo["output"] is None  # all parts served: nothing held
    # Any other order, repeated parts, and a different tensor in between: still each part's own result.
    h2 = torch.randn(3, 256, generator=gen)
    h3 = h2.clone()  # equal values, another tensor
    order = [(1, h2), (1, h2), (0, h3), (len(types) - 1, h2), (0, h), (0, h2)]
    for i, x in order:
        assert torch.equal(fused[i](x), separate[i](x)), (i, x.shape)
    for i in reversed(range(len(types))):  # a fresh input, parts called back to front
        x = torch.randn(2, 256, generator=gen)
        assert torch.equal(fused[i](x), separate[i](x))


def test_fused_projection_sees_in_place_updates_of_its_input() -> None:
    _group, fused, separate = _projection_set((T.Q8_0, T.Q8_0, T.Q8_0), (64, 32, 32), 256, seed=80)
    h = torch.randn(4, 256, generator=torch.Generator().manual_seed(12))
    assert torch.equal(fused[0](h), separate[0](h))
    h.mul_(2.0)
    assert torch.equal(fused[1](h), separate[1](h))


@pytest.fixture
def bf16_prefill() -> object:
    """The kernel's process-wide prefill switch on for one test, restored after."""
    before = torch.ops.dspark_q.prefill_bf16()
    torch.ops.dspark_q.set_prefill_bf16(True)
    yield None
    torch.ops.dspark_q.set_prefill_bf16(before)


@pytest.mark.parametrize("n", [70, 1100])  # one weight tile, two (the second partial)
def test_bf16_prefill_rounds_only_the_many_row_products(bf16_prefill: object, n: int) -> None:
    packed = _packed(T.Q4_K, n, 512, seed=40)
    lin = QuantLinear(packed)
    x = torch.randn(SMALL_M + 9, 512, generator=torch.Generator().manual_seed(10))
    y = lin(x)
    torch.ops.dspark_q.set_prefill_bf16(False)
    exact = lin(x)
    small_exact = lin(x[:8])
    torch.ops.dspark_q.set_prefill_bf16(True)
    assert not torch.equal(y, exact)  # the bf16 path ran
    ref = x.double() @ torch.from_numpy(packed.values()).double().t()
    # bf16 keeps 8 bits of each operand: errors ~2^-8 of the terms' sizes, far above fp32's
    scale = x.abs().double() @ torch.from_numpy(np.abs(packed.values())).double().t()
    assert ((y.double() - ref).abs() <= 2**-6 * scale + 1e-6).all()
    assert torch.equal(lin(x[:8]), small_exact)  # decode / verify rows: untouched


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K, T.Q8_0, T.Q5_0])
@pytest.mark.parametrize("n", [70, 72, 1096])  # row-major (70 is no multiple of 8), panels of 8 rows
def test_bf16_prefill_is_the_bf16_gemm_of_the_files_values(bf16_prefill: object, qtype: T, n: int) -> None:
    """The weights are rebuilt straight into bf16 (per panel, in a thread's scratch): they must round the
    file's exact values to nearest even, as converting a whole fp32 tile did, so the product is the bf16
    GEMM of those values, bit for bit."""
    packed = _packed(qtype, n, 512, seed=42)
    lin = QuantLinear(packed)
    x = torch.randn(SMALL_M + 9, 512, generator=torch.Generator().manual_seed(13))
    w = torch.from_numpy(packed.values()).float().bfloat16()
    tile = max(64, (64 << 20) // (512 * 4)) // 8 * 8
    ref = torch.cat([x.bfloat16() @ w[i : i + tile].t() for i in range(0, n, tile)], dim=1).float()
    assert torch.equal(lin(x), ref)


def test_bf16_prefill_serves_callers_in_and_out_of_inference_mode(bf16_prefill: object) -> None:
    # The engine decodes under inference mode, transformers' generate (the bench's hf_* methods) under
    # no_grad, in one process: the prefill buffers the kernel keeps, made by the one, served the other
    # (issue 33: writing into them raised "Inplace update to inference tensor outside InferenceMode").
    prefill_scratch_made_in_inference_mode()
    lin = QuantLinear(_packed(T.Q8_0, 70, 512, seed=41))
    x = torch.randn(SMALL_M + 9, 512, generator=torch.Generator().manual_seed(11))
    with torch.inference_mode():
        inside = lin(x)
    with torch.no_grad():
        outside = lin(x)
    with torch.inference_mode():
        inside_again = lin(x)
    assert inside.is_inference() and not outside.is_inference()
    assert torch.equal(outside, inside) and torch.equal(inside_again, inside)


def test_prefill_products_by_cpu_and_request() -> None:
    from dspark_lsp.errors import ModelError
    from dspark_lsp.models.loader import prefill_choice

    zen4, avx2 = {"avx2", "avx512_vnni", "avx512_bf16"}, {"avx2", "fma"}
    amx = zen4 | {"amx_tile", "amx_bf16"}
    assert prefill_choice(False, True, zen4) == "int8"  # int8 rows beat the bf16 GEMM without AMX
    assert prefill_choice(False, True, avx2) == "int8"
    assert prefill_choice(False, True, amx) == "bf16"  # AMX's bf16 GEMM is faster still
    assert prefill_choice(False, False, zen4) == "bf16"  # a build without int8 products
    assert prefill_choice(False, False, avx2) == "fp32"
    assert prefill_choice(True, True, zen4) == "fp32"  # dtype gguf: the file's exact arithmetic
    assert prefill_choice(False, True, zen4, "fp32") == "fp32"
    assert prefill_choice(False, True, zen4, "bf16") == "bf16"
    assert prefill_choice(False, True, amx, "int8") == "int8"
    assert prefill_choice(False, False, amx, "int8") == "bf16"  # asked for, not built: the best of the rest
    with pytest.raises(ModelError, match="DSPARK_PREFILL must be one of auto, int8, bf16, fp32, not 'int4'"):
        prefill_choice(False, True, zen4, "int4")


def test_loader_sets_the_kernels_prefill_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark_lsp.models import loader
    from dspark_lsp.quant.linear import apply_act8

    before = (torch.ops.dspark_q.prefill_bf16(), torch.ops.dspark_q.prefill_int8(), torch.ops.dspark_q.act8())
    try:
        monkeypatch.setattr(loader, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
        monkeypatch.delenv(loader.PREFILL_ENV, raising=False)
        loader._choose_prefill_precision("m", explicit=False)
        if torch.ops.dspark_q.act8():
            assert torch.ops.dspark_q.prefill_int8() > 0 and not torch.ops.dspark_q.prefill_bf16()
        else:
            assert torch.ops.dspark_q.prefill_int8() == 0 and torch.ops.dspark_q.prefill_bf16()
        loader._choose_prefill_precision("m", explicit=True)  # dtype gguf: the file's exact arithmetic
        assert torch.ops.dspark_q.prefill_int8() == 0 and not torch.ops.dspark_q.prefill_bf16()
        monkeypatch.setenv(loader.PREFILL_ENV, "bf16")
        loader._choose_prefill_precision("m", explicit=False)
        assert torch.ops.dspark_q.prefill_int8() == 0 and torch.ops.dspark_q.prefill_bf16()
        monkeypatch.setenv(loader.PREFILL_ENV, "fp32")
        loader._choose_prefill_precision("m", explicit=False)
        assert torch.ops.dspark_q.prefill_int8() == 0 and not torch.ops.dspark_q.prefill_bf16()
    finally:
        torch.ops.dspark_q.set_prefill_bf16(before[0])
        torch.ops.dspark_q.set_prefill_int8(before[1])
        apply_act8(before[2])
