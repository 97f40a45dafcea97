"""Verify-cost profiles: ms of one target forward of n tokens on a KV cache, by device and dtype.

The scheduler uses the *shape* of the curve (how much dearer n tokens are than 1), not absolute time.
Figures for the CPU were measured on the project's 2-core machines (Qwen2.5-Coder-0.5B, context 256;
docs/KERNEL.md): memory-bound decoding makes 2 tokens cost what 1 does; fp32 then jumps near 2x at 4
tokens, bf16 rises slowly.
On a GPU a forward of up to 8 tokens costs about the same as one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

COST_CPU_FP32: dict[int, float] = {1: 128.0, 2: 126.0, 4: 245.0, 6: 230.0, 8: 265.0}
COST_CPU_BF16: dict[int, float] = {1: 120.0, 2: 125.0, 4: 141.0, 6: 167.0, 8: 187.0}
# Measured on our CI CPU with the linear layers pre-packed (models.packing): flat up to 8 tokens.
COST_CPU_FP32_PACKED: dict[int, float] = {1: 113.0, 2: 116.0, 4: 112.0, 8: 116.0, 16: 150.0}
COST_GPU: dict[int, float] = {1: 1.0, 4: 1.02, 8: 1.05}
# The quantized GGUF target (dspark_lsp.quant, int16 activations, panels of 8 weight rows, one C++ op per
# layer) on the 2-core Zen 4 host, context 256 (the bench's load-time calibration,
# bench/results/2026-12-02-s14/bench4-full.log): the weights stream once per forward and each row adds
# its integer multiply-adds, now about a quarter of a one-token forward per row.
COST_CPU_GGUF: dict[int, float] = {1: 20.4, 2: 21.7, 3: 21.7, 4: 28.1, 5: 28.3, 6: 30.2, 8: 35.0}
# Forward lengths the load-time calibration times: every draft length the scheduler may ask for (k <= 5
# by default, so up to 6 tokens) and 8, so the padding plan can see which shapes are cheap.
CALIBRATION_SIZES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)


def interpolate_cost(table: dict[int, float], n: int) -> float:
    """Cost of a forward of n tokens from a table: linear between entries, proportional past the last."""
    keys = sorted(table)
    if n <= keys[0]:
        return table[keys[0]]
    if n >= keys[-1]:
        return table[keys[-1]] * n / keys[-1]
    for a, b in zip(keys, keys[1:], strict=False):
        if a <= n <= b:
            return table[a] + (table[b] - table[a]) * (n - a) / (b - a)
    return table[keys[-1]]


def cost_profile(device: str, dtype_name: str, packed: bool = False) -> dict[int, float]:
    if device.startswith("cuda") or device == "mps":
        return dict(COST_GPU)
    if dtype_name == "gguf":
        return dict(COST_CPU_GGUF)
    if "bfloat16" in dtype_name or "float16" in dtype_name:
        return dict(COST_CPU_BF16)
    return dict(COST_CPU_FP32_PACKED if packed else COST_CPU_FP32)


def measure_verify_cost(
    model: Any,
    context: int = 128,
    sizes: tuple[int, ...] = CALIBRATION_SIZES,
    repeats: int = 3,
    cancel: threading.Event | None = None,
) -> dict[int, float]:
    """Fastest of ``repeats`` ms of one forward of n tokens on a ``context``-token KV cache, measured on this machine.
    With ``cancel``: the context goes in 16 tokens a forward and every forward checks it first, so a
    caller waits at most one short forward; a cancelled measurement returns {}.

    The shape of this curve decides whether drafting pays at all: the first test machine verified 2 tokens
    for the price of 1, but we have measured CPUs where 2 tokens cost twice as much (GEMM with a tiny M
    dimension is a poor kernel there). A second or two at load time buys the right schedule.
    """
    import time

    from dspark_lsp.engine.kv import crop, forward, new_cache

    vocab = int(getattr(model.config, "vocab_size", 1000))
    ids = [(i * 7919) % max(2, min(vocab, 50_000)) for i in range(context + max(sizes))]
    sync = _device_sync(model)
    cache = new_cache(model)
    step = context if cancel is None else 16
    for pos in range(0, context, step):
        if cancel is not None and cancel.is_set():
            return {}
        forward(model, ids[pos : min(pos + step, context)], cache, keep=1)
    forward(model, ids[context : context + 1], cache)  # warm the decode path once
    crop(cache, context)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    # Rounds over all sizes rather than all repeats of one size in a row: a slow spell of a shared host
    # then lands on several sizes once each instead of on every sample of one size (on the Zen 4 VM a
    # size-by-size calibration once put 1 token at 52 ms and 2 at 52, where 1 costs ~39: the scheduler
    # then planned with a curve that was flat where it is not).
    for _ in range(repeats):
        for n in sizes:
            if cancel is not None and cancel.is_set():
                return {}
            sync()
            t0 = time.perf_counter()
            forward(model, ids[context : context + n], cache)
            sync()
            times[n].append((time.perf_counter() - t0) * 1000)
            crop(cache, context)
    # The minimum, not the median: on a shared machine interference only ever adds time.
    return {n: round(min(times[n]), 3) for n in sizes}


def _device_sync(model: Any) -> Any:
    """A no-op, or ``torch.cuda.synchronize`` for a model on a GPU (whose forward returns before it ran)."""
    import torch

    param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    if param is not None and param.device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def raw_monotone(raw: dict[int, float]) -> dict[int, float]:
    """The curve without padding: more tokens never cost less (a noisy dip would make the scheduler
    draft longer than it should)."""
    out, running = {}, 0.0
    for n in sorted(raw):
        running = max(running, raw[n])
        out[n] = running
    return out


@dataclass(frozen=True)
class ForwardPlan:
    """How to run target forwards on this machine, from a measured (raw) cost curve.

    Forward cost is not monotone in the number of tokens on every CPU: with oneDNN-packed fp32 weights
    our CI machine measured 80 / 99 / 75 / 71 / 72 / 74 / 95 ms for 1 / 2 / 3 / 4 / 5 / 6 / 8 tokens (the
    1- and 2-row GEMM shapes take slower kernels). Padding a forward with dummy tokens after the real
    ones changes nothing the real ones compute (attention is causal) and the padding's cache entries are
    cropped at once, so n tokens can always be run at the price of the cheapest measured length >= n.
    """

    # n -> ms of a forward of n tokens, padding included (non-decreasing in n): what the scheduler uses.
    cost_ms: dict[int, float] = field(default_factory=dict)
    # The raw measurement the plan was made from (for reports, and for running without padding).
    measured_ms: dict[int, float] = field(default_factory=dict)
    # n -> the length to pad a forward of n tokens to; only where it saves at least `min_saving`.
    pad_to: dict[int, int] = field(default_factory=dict)


def plan_forwards(raw: dict[int, float], min_saving: float = 0.03) -> ForwardPlan:
    """The padding plan and the effective cost curve for a raw per-length cost table."""
    if not raw:
        return ForwardPlan()
    top = max(raw)
    cost = {n: interpolate_cost(raw, n) for n in range(1, top + 1)}
    pad_to: dict[int, int] = {}
    effective: dict[int, float] = {}
    for n in range(1, top + 1):
        best_m, best = n, cost[n]
        for m in sorted(raw):  # pad only to lengths that were measured, not interpolated
            if m > n and raw[m] < best:
                best_m, best = m, raw[m]
        if best_m != n and best <= cost[n] * (1.0 - min_saving):
            pad_to[n] = best_m
            effective[n] = round(best, 3)
        else:
            effective[n] = round(cost[n], 3)
    # Non-decreasing, as the scheduler assumes: a longer forward can always be padded like a shorter one.
    for n in range(top - 1, 0, -1):
        effective[n] = min(effective[n], effective[n + 1])
    return ForwardPlan(cost_ms=effective, pad_to=pad_to, measured_ms=dict(raw))


def calibrate_forwards(model: Any, cancel: threading.Event | None = None) -> ForwardPlan:
    """Time ``model`` on this machine (1-2 s for the 0.5B on a CPU) and plan its forwards: what the
    server does at load and the benchmark does before its methods run. Cancelled: an empty plan."""
    return plan_forwards(measure_verify_cost(model, sizes=CALIBRATION_SIZES, repeats=2, cancel=cancel))
