"""The bf16 prefill's weight rebuild (qkernel.cpp, "Fast bf16 rebuild of panels"): every rebuild path gives
the bits torch's own fp32 -> bf16 conversion gives the file's exact values, for every type and layout.

The kernel has three paths (``set_prefill_rebuild``): 0, the AVX-512 one (16 lanes, a row's 32 weights per
conversion); 1, the 8-lane one it replaced (rounded as written); 2, fp32 rows in a scratch rounded by c10's
scalar code — what a CPU without AVX512-BF16 runs. A build falls back to the next path down where it lacks
one, so on any machine each test runs what that machine can run; on an AVX512-BF16 + VBMI host all three.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from quant_testlib import K_QUANTS, SUPPORTED, T, random_blocks

from dspark_lsp.models.loader import cpu_flags
from dspark_lsp.quant import blocks
from dspark_lsp.quant.build import ENV_MARCH, KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import SMALL_M, QuantLinear, kernel_tensors

try:
    load_kernel()
except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
    pytest.skip(f"the quantized kernel is unavailable here: {exc}", allow_module_level=True)

PATHS = {"fast": 0, "rows": 1, "scratch": 2}



@pytest.fixture
def rebuild_path() -> Iterator[None]:
    """The kernel's process-wide rebuild path restored after the test (the conftest does not know it)."""
    before = torch.ops.dspark_q.prefill_rebuild()
    yield None
    torch.ops.dspark_q.set_prefill_rebuild(before)


def _layouts(qtype: T, n: int) -> dict[str, blocks.Packed]:
    """Every form the kernel holds a matrix of ``qtype`` in: row-major, panels with fp32 scales, and where
    the type allows, compact super-block scales, 6-bit Q6_K codes and fp16 scales."""
    k = 512 if qtype in K_QUANTS else 160  # 160: five groups, fewer than a super-block's eight
    raw = random_blocks(qtype, n, k, np.random.default_rng(int(qtype) * 100 + n), scale=0.05, special=True)
    row = blocks.pack_tensor(raw, int(qtype), n, k)
    out = {"rows": row}
    if n % blocks.PANEL == 0:
        out["panels"] = blocks.interleave(row)
        if blocks.can_compact(row):
            out["compact"] = blocks.interleave(row, compact=True)
            if qtype == T.Q6_K:
                out["six"] = blocks.interleave(row, compact=True, six=True)
        if blocks.can_half(out["panels"]):
            out["half"] = blocks.half_scales(out["panels"])
    return out


def _rebuilt(p: blocks.Packed, path: int, n0: int = 0, rows: int | None = None) -> torch.Tensor:
    rows = p.n - n0 if rows is None else rows
    t = kernel_tensors(p)
    out = torch.full((rows, p.k), float("nan"), dtype=torch.bfloat16)  # a row left out would show as NaN
    torch.ops.dspark_q.rebuild_bf16(out, p.kind, t["codes"], t["scale"], t["off"], p.shift, n0)
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def test_the_fast_path_is_in_effect_where_the_cpu_has_it(rebuild_path: None) -> None:
    """On a CPU with AVX512-BF16 and VBMI the kernel (built for it) takes path 0, so the tests below test it."""
    if os.environ.get(ENV_MARCH, "native") not in ("", "native"):
        pytest.skip(f"{ENV_MARCH} builds the kernel for another CPU than this one")
    flags = cpu_flags()
    got = torch.ops.dspark_q.set_prefill_rebuild(PATHS["fast"])
    if {"avx512_bf16", "avx512vbmi", "avx512bw"} <= flags:
        assert got == PATHS["fast"]
    else:
        assert got in (PATHS["rows"], PATHS["scratch"])
    assert torch.ops.dspark_q.set_prefill_rebuild(PATHS["scratch"]) == PATHS["scratch"]  # every build has it


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("n", [70, 296])  # row-major only (70 is no multiple of 8); 37 panels over 2 threads
@pytest.mark.parametrize("qtype", SUPPORTED, ids=[t.name for t in SUPPORTED])
def test_every_path_rounds_the_files_values_as_torch_does(rebuild_path: None, qtype: T, n: int, path: str) -> None:
    """The bf16 tile holds, bit for bit, torch's round-to-nearest-even of the exact fp32 weights (which
    test_quant_blocks holds to the gguf package): -0.0 and +0.0 apart, ties to even. Any other arithmetic
    (a conversion that truncates or rounds ties away, a code or scale of the wrong row) fails on the data
    (see the next test)."""
    torch.ops.dspark_q.set_prefill_rebuild(PATHS[path])
    for name, p in _layouts(qtype, n).items():
        want = _bits(torch.from_numpy(p.values()).bfloat16())
        got = _bits(_rebuilt(p, PATHS[path]))
        bad = int((got != want).sum())
        assert bad == 0, f"{qtype.name} {name} (kind {p.kind}), path {path}: {bad} of {want.numel()} weights differ"


@pytest.mark.parametrize("qtype", SUPPORTED, ids=[t.name for t in SUPPORTED])
def test_the_data_tells_the_right_rounding_from_near_misses(qtype: T) -> None:
    """The previous test's data is worth something only if a plausible wrong rebuild gives other bits on
    it. In every supported type a weight's product scale * code is exact in fp32 (at most 11 + 7 + 6
    significant bits: fp16 d, integer sub-scale, code), so an fma would change nothing; what rounds is the
    offset's add and the conversion to bf16. So: the data must hold values that truncation rounds
    otherwise, and values halfway between two bf16 values (ties), which ties-away-from-zero rounds
    otherwise."""
    p = _layouts(qtype, 296)["panels"]
    ref = torch.from_numpy(p.values())
    want = _bits(ref.bfloat16())
    u = ref.view(torch.int32)
    truncated = (u & ~0xFFFF).view(torch.float32).bfloat16()
    assert (_bits(truncated) != want).any()
    ties = (u & 0xFFFF) == 0x8000
    assert ties.any(), "no fp32 value lies halfway between two bf16 values"
    away = torch.where(ties, (u + 0x8000).view(torch.float32), ref).bfloat16()  # ties move away from zero
    assert (_bits(away) != want).any()


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K, T.Q8_0, T.Q4_0], ids=lambda t: t.name)
def test_a_tile_from_the_middle_of_a_matrix(rebuild_path: None, qtype: T) -> None:
    """Rows n0 .. n0 + t (a prefill tile after the first) are those rows, for every path."""
    p = _layouts(qtype, 296)["compact" if qtype in K_QUANTS else "half" if qtype != T.Q4_0 else "panels"]
    want = _bits(torch.from_numpy(p.values()[64:200]).bfloat16())
    for path in PATHS.values():
        torch.ops.dspark_q.set_prefill_rebuild(path)
        assert torch.equal(_bits(_rebuilt(p, path, n0=64, rows=136)), want)


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K, T.Q5_0], ids=lambda t: t.name)
def test_prefill_products_are_the_same_on_every_path(rebuild_path: None, qtype: T) -> None:
    """What the prefill computes from the tile: the same output bits whichever path rebuilt it."""
    before = torch.ops.dspark_q.prefill_bf16()
    torch.ops.dspark_q.set_prefill_bf16(True)
    try:
        lin = QuantLinear(_layouts(qtype, 296)["compact" if qtype in K_QUANTS else "half"])
        x = torch.randn(SMALL_M + 9, lin.in_features, generator=torch.Generator().manual_seed(5))
        outs = []
        for path in PATHS.values():
            torch.ops.dspark_q.set_prefill_rebuild(path)
            outs.append(lin(x))
        assert all(torch.equal(o, outs[0]) for o in outs[1:])
    finally:
        torch.ops.dspark_q.set_prefill_bf16(before)


def test_rebuild_refuses_part_of_a_panel() -> None:
    p = _layouts(T.Q8_0, 296)["panels"]
    t = kernel_tensors(p)
    with pytest.raises(RuntimeError, match="whole panels"):
        torch.ops.dspark_q.rebuild_bf16(torch.empty(12, p.k, dtype=torch.bfloat16), p.kind, t["codes"], t["scale"],
                                        t["off"], p.shift, 0)
