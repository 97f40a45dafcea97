"""int8 activations for the few-row panel products (DSPARK_ACT8, qkernel.cpp "int8 activations").

Held to a float64 reference of the same arithmetic (each group of 32 activations rounded to int8 steps of
absmax / 127, exact integer dots, the weights' scales and offsets), to batch invariance (a row gives the
same bits in a product of any width, and a panel the same bits whether it ran alone or paired with its
neighbour), and to the int16 path where the int8 one does not apply (row-major matrices, 6-bit Q6_K).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from quant_testlib import K_QUANTS, SUPPORTED, T, model_to_gguf, random_blocks, random_qwen2, tiny_config

from dspark_lsp.drafts.causal_lm import ModelDraftSource
from dspark_lsp.drafts.ngram import NgramDraftSource
from dspark_lsp.engine import kv
from dspark_lsp.engine.config import DecodeConfig, SchedulerConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.models.gguf_target import build_quantized_model
from dspark_lsp.quant import blocks
from dspark_lsp.quant.build import ENV_MARCH, KernelUnavailable, load_kernel
from dspark_lsp.quant.linear import ENV_ACT8, ENV_SIX, QuantLinear, act8_available, apply_act8

try:
    load_kernel()
except KernelUnavailable as exc:  # pragma: no cover - the kernel builds wherever the project is developed
    pytest.skip(f"the quantized kernel is unavailable here: {exc}", allow_module_level=True)

needs_act8 = pytest.mark.skipif(not act8_available(), reason="this kernel build has no int8 products "
                                "(needs x86 with AVX2)")
IDS = [t.name for t in SUPPORTED]
# The types of the 1.5B (Q4_K, Q6_K) and 0.5B (also Q5_0, Q8_0) targets.
TARGET_TYPES = (T.Q4_K, T.Q6_K, T.Q5_0, T.Q8_0)


@pytest.fixture(autouse=True)
def _int16_after() -> Iterator[None]:
    # the switch is process-wide: leave it off for every other test
    yield
    apply_act8(False)


def _packed(qtype: T, n: int, seed: int, k: int | None = None) -> blocks.Packed:
    k = k or (512 if qtype in K_QUANTS else 160)  # 160: five groups
    raw = random_blocks(qtype, n, k, np.random.default_rng(seed), scale=0.05)
    return blocks.pack_tensor(raw, int(qtype), n, k)


def _x(m: int, k: int, seed: int) -> torch.Tensor:
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(seed))
    x[:, 32:64] *= 1e-3  # groups of very different sizes: the scale is per group
    x[0, 64:96] = 0.0  # an all-zero group (scale 0)
    return x


def int8_reference(x: torch.Tensor, p: blocks.Packed) -> np.ndarray:
    """x @ W.T in float64 with x as the kernel rounds it: per row and group of 32, q = round-to-even of
    x * (127 / absmax) in fp32 and x ~= q * (absmax / 127); the offset term of affine types multiplies the
    exact sum of x (as the kernel does: it keeps the fp32 group sums)."""
    xf = x.numpy().astype(np.float32)
    m, k = xf.shape
    xg = xf.reshape(m, k // 32, 32)
    amax = np.abs(xg).max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint((xg * inv).astype(np.float32))
    assert np.abs(q).max() <= 127
    xhat = (q.astype(np.float64) * (amax / np.float32(127)).astype(np.float64)).reshape(m, k)
    w = p.values().astype(np.float64)
    w_codes = dataclasses.replace(p, off=np.zeros(0, np.float32)).values().astype(np.float64)
    return np.asarray(xhat @ w_codes.T + xf.astype(np.float64) @ (w - w_codes).T)


def _worst(y: torch.Tensor, x: torch.Tensor, p: blocks.Packed, rel: float = 1e-5) -> float:
    # error as a fraction of rel * (sum of the terms' magnitudes): fp32 accumulation stays far below 1; a
    # wrong code bias, scale, offset or rounding step (int16's absmax / 32767) is far above it
    ref = int8_reference(x, p)
    bound = rel * (np.abs(x.numpy()).astype(np.float64) @ np.abs(p.values()).astype(np.float64).T) + 1e-30
    return float((np.abs(y.numpy().astype(np.float64) - ref) / bound).max())


@needs_act8
@pytest.mark.parametrize("qtype", SUPPORTED, ids=IDS)
def test_int8_products_match_the_reference_of_the_same_arithmetic(qtype: T) -> None:
    p = _packed(qtype, 48, seed=10 + int(qtype))  # 6 panels: paired passes and, per thread, single ones
    lin = QuantLinear(p)
    assert lin.kind in (14, 18)
    x = _x(5, p.k, seed=int(qtype))
    assert apply_act8(True)
    assert _worst(lin(x), x, p) <= 1.0
    # the same reference rejects the int16 path: the bound tells the two roundings apart
    assert not apply_act8(False)
    assert _worst(lin(x), x, p) > 10.0


@needs_act8
@pytest.mark.parametrize("qtype", TARGET_TYPES, ids=[t.name for t in TARGET_TYPES])
def test_int8_rows_do_not_depend_on_the_batch(qtype: T) -> None:
    p = _packed(qtype, 40, seed=30 + int(qtype))  # 5 panels: two pairs and one alone on one thread
    lin = QuantLinear(p)
    x = _x(16, p.k, seed=40 + int(qtype))
    assert apply_act8(True)
    alone = torch.cat([lin(x[i : i + 1]) for i in range(16)])
    for m in (*range(1, 14), 16):
        assert torch.equal(lin(x[:m]), alone[:m]), f"{m} rows"
        assert torch.equal(lin(x[16 - m :]), alone[16 - m :]), f"last {m} rows"


@needs_act8
@pytest.mark.parametrize("qtype", TARGET_TYPES, ids=[t.name for t in TARGET_TYPES])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_panel_gives_the_same_bits_alone_or_paired(qtype: T, threads: int) -> None:
    # Rows 8-15 of a 24-row matrix are paired with rows 0-7 (one thread) while in the matrix of rows 8-23
    # they are paired with rows 16-23; rows 16-23 run alone in the first and paired in the second.
    k = 512 if qtype in K_QUANTS else 160
    raw = random_blocks(qtype, 24, k, np.random.default_rng(50 + int(qtype)), scale=0.05)
    whole = QuantLinear(blocks.pack_tensor(raw, int(qtype), 24, k))
    tail = QuantLinear(blocks.pack_tensor(np.ascontiguousarray(raw[8:]), int(qtype), 16, k))
    x = _x(6, k, seed=60)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert apply_act8(True)
        assert torch.equal(whole(x)[:, 8:], tail(x))
    finally:
        torch.set_num_threads(before)


def test_uncovered_layouts_keep_the_int16_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Row-major matrices (rows not a multiple of 8) have no int8 products: with the switch on they give the
    # int16 path's bits. (On a build without int8 products, everything does.) 6-bit Q6_K panels take int8
    # on every build that has it (VNNI or AVX2's vpmaddubsw): other bits.
    cases = [QuantLinear(_packed(T.Q4_K, 45, seed=70)), QuantLinear(_packed(T.Q5_0, 45, seed=71))]
    monkeypatch.setenv(ENV_SIX, "1")
    cases.append(QuantLinear(_packed(T.Q6_K, 16, seed=72)))
    monkeypatch.delenv(ENV_SIX)
    assert [c.kind for c in cases] == [4, 8, 16]
    for lin in cases:
        x = _x(4, lin.in_features, seed=73)
        apply_act8(False)
        y16 = lin(x)
        apply_act8(True)
        int8 = lin.kind == 16 and act8_available()
        assert torch.equal(lin(x), y16) != int8


@needs_act8
def test_the_switch_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    lin = QuantLinear(_packed(T.Q4_K, 16, seed=80))
    x = _x(2, lin.in_features, seed=81)
    monkeypatch.setenv(ENV_ACT8, "0")
    assert not apply_act8()
    y16 = lin(x)
    monkeypatch.delenv(ENV_ACT8, raising=False)
    assert apply_act8() and bool(torch.ops.dspark_q.act8())  # on by default where the build has it
    assert torch.equal(lin(x), y8 := lin(x))
    monkeypatch.setenv(ENV_ACT8, "1")
    assert apply_act8() and bool(torch.ops.dspark_q.act8())
    assert not torch.equal(y8, y16)
    monkeypatch.setenv(ENV_ACT8, "0")
    assert not apply_act8()
    assert torch.equal(lin(x), y16)


# ------------------------------------------------------------------------ losslessness on a whole model
def _tiny_kquant_target(tmp_path: Path, seed: int) -> torch.nn.Module:
    """A tiny model whose matrices are the 1.5B's types (Q4_K, and Q6_K for ffn_down and the tied head)."""
    config = tiny_config(vocab=256, hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, tie=True)
    types = {"token_embd.weight": T.Q6_K}
    for i in range(2):
        types.update({f"blk.{i}.{r}.weight": T.Q4_K for r in ("attn_q", "attn_k", "attn_v", "attn_output",
                                                              "ffn_gate", "ffn_up")})
        types[f"blk.{i}.ffn_down.weight"] = T.Q6_K
    path = tmp_path / f"tiny-kquant-{seed}.gguf"
    model_to_gguf(path, random_qwen2(seed, config), types, seed=seed)
    target, _report = build_quantized_model(path, config)
    return target


@needs_act8
def test_speculation_with_int8_activations_equals_one_token_decoding(tmp_path: Path) -> None:
    """The default path on a CPU that has it: a tiny K-quant model (panels of every row count the verify
    uses), greedy speculative decoding with a self draft at k = 4 and with n-gram lookup gives exactly
    the tokens of one-token decoding, both with int8 activations; and int8 did change the logits."""
    target = _tiny_kquant_target(tmp_path, seed=7)
    decoder = SpeculativeDecoder(target)
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, 256, 12)]
    with torch.inference_mode():  # 4 rows: the few-row products, where the switch acts
        apply_act8(False)
        logits16 = kv.forward(target, prompt[:4], kv.new_cache(target))
        apply_act8(True)
        logits8 = kv.forward(target, prompt[:4], kv.new_cache(target))
    assert not torch.equal(logits8, logits16)
    fixed = DecodeConfig(max_new_tokens=24, draft_mode="ar", scheduler=SchedulerConfig(fixed_k=4, tau=0.05, tau_min=0.05))
    for p in (prompt, prompt[:3], [5, 5, 5, 5, 5, 5]):
        alone = decoder.generate(p, config=DecodeConfig(max_new_tokens=24))
        spec = decoder.generate(p, config=fixed, draft=ModelDraftSource(target, 256, name="self"))
        look = decoder.generate(p, config=DecodeConfig(max_new_tokens=24), draft=NgramDraftSource(max_ngram=3))
        assert spec.tokens == alone.tokens == look.tokens
        assert spec.stats.proposed > 0 and spec.stats.accepted == spec.stats.proposed


# ------------------------------------------------------------ the AVX2 build against the VNNI build
_CROSS_CHILD = """
import sys, torch
from tests.quant.test_quant_act8 import TARGET_TYPES, _packed, _x
from dspark_lsp.quant.linear import QuantLinear, apply_act8
assert apply_act8(True) and not bool(torch.ops.dspark_q.act8_vnni())
out = {}
for qtype in TARGET_TYPES:
    lin = QuantLinear(_packed(qtype, 40, seed=90 + int(qtype)))
    x = _x(8, lin.in_features, seed=91)
    out[qtype.name] = [lin(x[:m]) for m in range(1, 9)]
torch.save(out, sys.argv[1])
"""


@pytest.mark.slow
@needs_act8
def test_the_avx2_build_gives_the_vnni_builds_bits(tmp_path: Path) -> None:
    """A CPU without VNNI (AVX2: vpmaddubsw for 4-bit panels, int16 products for byte panels) computes the
    same integer sums and fp32 steps as one with it: a kernel built for x86-64-v3 in a child process gives
    the VNNI build's bits for every target type and every verify width."""
    if not bool(torch.ops.dspark_q.act8_vnni()):
        pytest.skip("this kernel build has no VNNI products to compare with")
    dest = tmp_path / "avx2.pt"
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), str(root / "tests" / "helpers"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, ENV_MARCH: "x86-64-v3", "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", _CROSS_CHILD, str(dest)], env=env, cwd=root,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = torch.load(dest)
    assert apply_act8(True)
    for qtype in TARGET_TYPES:
        lin = QuantLinear(_packed(qtype, 40, seed=90 + int(qtype)))
        x = _x(8, lin.in_features, seed=91)
        for m in range(1, 9):
            assert torch.equal(lin(x[:m]), theirs[qtype.name][m - 1]), f"{qtype.name}, {m} rows"


@needs_act8
@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K], ids=["Q4_K", "Q6_K"])
def test_where_pairing_starts_changes_no_bits(qtype: T) -> None:
    """The row count from which two panels run a pass (set_act8_pair_min; 6 on AMD Zen 4, 3 elsewhere) is a
    matter of time only: every width gives the same bits whether its panels ran paired or alone."""
    lin = QuantLinear(_packed(qtype, 48, seed=100 + int(qtype)))
    x = _x(8, lin.in_features, seed=101)
    assert apply_act8(True)
    default = torch.ops.dspark_q.set_act8_pair_min(1)
    try:
        paired = [lin(x[:m]) for m in range(1, 9)]
        torch.ops.dspark_q.set_act8_pair_min(99)
        alone = [lin(x[:m]) for m in range(1, 9)]
    finally:
        torch.ops.dspark_q.set_act8_pair_min(default)
    for m in range(8):
        assert torch.equal(paired[m], alone[m]), f"{m + 1} rows"
    flags = Path("/proc/cpuinfo").read_text(errors="replace") if Path("/proc/cpuinfo").exists() else ""
    zen4 = "AuthenticAMD" in flags and "\ncpu family\t: 25\n" in flags
    assert default == (6 if zen4 else 3)


# ------------------------------------------------------------ a prompt's rows through the int8 products
@pytest.fixture
def _prefill_int8_off() -> Iterator[None]:
    before = int(torch.ops.dspark_q.prefill_int8())
    yield
    torch.ops.dspark_q.set_prefill_int8(before)


@needs_act8
@pytest.mark.usefixtures("_prefill_int8_off")
@pytest.mark.parametrize("qtype", TARGET_TYPES, ids=[t.name for t in TARGET_TYPES])
@pytest.mark.parametrize("block", [8, 13, 64])
def test_int8_prefill_rows_are_the_decode_rows(qtype: T, block: int) -> None:
    """With set_prefill_int8 a product of more than small_m rows runs the few-row int8 products a block of
    rows at a time: every row has the bits of that row alone (the same rounding decode gives it), whatever
    the block, where the rebuilt-weight GEMM gives other bits."""
    p = _packed(qtype, 40, seed=70 + int(qtype))
    lin = QuantLinear(p, small_m=4)
    x = _x(37, p.k, seed=71)
    assert apply_act8(True)
    alone = torch.cat([lin(x[i : i + 1]) for i in range(37)])
    torch.ops.dspark_q.set_prefill_int8(0)
    gemm = lin(x)
    assert not torch.equal(gemm, alone)
    torch.ops.dspark_q.set_prefill_int8(block)
    assert torch.equal(lin(x), alone)
    apply_act8(False)  # the int8 products off: prefill goes back to the GEMM
    assert torch.equal(lin(x), gemm)


@needs_act8
@pytest.mark.usefixtures("_prefill_int8_off")
def test_speculation_after_an_int8_prefill_equals_one_token_decoding(tmp_path: Path) -> None:
    target = _tiny_kquant_target(tmp_path, seed=8)
    decoder = SpeculativeDecoder(target)
    assert apply_act8(True)
    prompt = [int(t) for t in np.random.default_rng(4).integers(0, 256, 70)]  # > 32 rows: the prefill path
    with torch.inference_mode():
        gemm = kv.forward(target, prompt, kv.new_cache(target))
        torch.ops.dspark_q.set_prefill_int8(16)
        rows8 = kv.forward(target, prompt, kv.new_cache(target))
    assert not torch.equal(gemm, rows8)  # the prompt did take the int8 rows
    fixed = DecodeConfig(max_new_tokens=24, draft_mode="ar", scheduler=SchedulerConfig(fixed_k=4, tau=0.05, tau_min=0.05))
    alone = decoder.generate(prompt, config=DecodeConfig(max_new_tokens=24))
    spec = decoder.generate(prompt, config=fixed, draft=ModelDraftSource(target, 256, name="self"))
    assert spec.tokens == alone.tokens
    assert spec.stats.proposed > 0 and spec.stats.accepted == spec.stats.proposed
