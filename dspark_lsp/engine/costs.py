"""Verify-cost profiles: ms of one target forward of n tokens on a KV cache, by device and dtype.

The scheduler uses the *shape* of the curve (how much dearer n tokens are than 1), not absolute time.
Figures for the CPU come from DESIGN.md §3 (Qwen2.5-Coder-0.5B, 2 cores, context 256): memory-bound
decoding makes 2 tokens cost what 1 does; fp32 then jumps near 2x at 4 tokens, bf16 rises slowly.
On a GPU a forward of up to 8 tokens costs about the same as one.
"""

from __future__ import annotations

from typing import Any

COST_CPU_FP32: dict[int, float] = {1: 128.0, 2: 126.0, 4: 245.0, 6: 230.0, 8: 265.0}
COST_CPU_BF16: dict[int, float] = {1: 120.0, 2: 125.0, 4: 141.0, 6: 167.0, 8: 187.0}
# Measured on our CI CPU with the linear layers pre-packed (models.packing): flat up to 8 tokens.
COST_CPU_FP32_PACKED: dict[int, float] = {1: 113.0, 2: 116.0, 4: 112.0, 8: 116.0, 16: 150.0}
COST_GPU: dict[int, float] = {1: 1.0, 4: 1.02, 8: 1.05}


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
    if "bfloat16" in dtype_name or "float16" in dtype_name:
        return dict(COST_CPU_BF16)
    return dict(COST_CPU_FP32_PACKED if packed else COST_CPU_FP32)


def measure_verify_cost(
    model: Any,
    context: int = 128,
    sizes: tuple[int, ...] = (1, 2, 4, 8),
    repeats: int = 3,
    monotone: bool = True,
) -> dict[int, float]:
    """Fastest of ``repeats`` ms of one forward of n tokens on a ``context``-token KV cache, measured on this machine.

    The shape of this curve decides whether drafting pays at all: DESIGN.md's machine verified 2 tokens
    for the price of 1, but we have measured CPUs where 2 tokens cost twice as much (GEMM with a tiny M
    dimension is a poor kernel there). A second or two at load time buys the right schedule.
    """
    import time

    from dspark_lsp.engine.kv import crop, forward, new_cache

    vocab = int(getattr(model.config, "vocab_size", 1000))
    ids = [(i * 7919) % max(2, min(vocab, 50_000)) for i in range(context + max(sizes))]
    cache = new_cache(model)
    forward(model, ids[:context], cache)
    forward(model, ids[context : context + 1], cache)  # warm the decode path once
    crop(cache, context)
    out: dict[int, float] = {}
    for n in sizes:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            forward(model, ids[context : context + n], cache)
            times.append((time.perf_counter() - t0) * 1000)
            crop(cache, context)
        # The minimum, not the median: on a shared machine interference only ever adds time.
        out[n] = round(min(times), 3)
    if not monotone:  # the raw figures, for reports
        return out
    # More tokens never cost less: a noisy dip would make the scheduler draft longer than it should.
    running = 0.0
    for n in sorted(out):
        running = max(running, out[n])
        out[n] = running
    return out
