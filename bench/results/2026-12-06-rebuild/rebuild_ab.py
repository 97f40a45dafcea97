"""The bf16 prefill's weight rebuild, old path ("rows": 8 lanes) against new ("fast": AVX-512), in one process.

Usage: rebuild_ab.py MODEL [--rounds R] [--sizes 64,128,256] [--paths rows,fast]

Loads MODEL once (dtype auto: bf16 prefill products on this CPU) and flips the kernel's process-wide rebuild
path between measurements (both paths read the same loaded panels), in ABBA order each round:
- rebuild alone: every quantized matrix a prefill slice multiplies (the decoder layers' products; the head
  runs one row, not rebuilt), rebuilt tile by tile as qmm does into one kept bf16 buffer; summed ms;
- a prefill slice: one forward of n tokens on an empty KV cache (the last row's logits, as the engine's
  prefill asks), for each n.
Before timing, every quantized matrix's tiles are rebuilt on each path and compared bit for bit, and the
logits of every size and path are hashed (sha256 of the fp32 bytes; for the smallest
size all rows, so the head's prefill GEMM is covered too): identical hashes mean identical logits. With a
kernel build that has no rebuild switch (a checkout before it), runs its one path and prints its hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from typing import Any

import torch


def _matrices(model: Any) -> list[Any]:
    from dspark_lsp.quant.linear import QuantLinear

    return [m for name, m in model.named_modules() if isinstance(m, QuantLinear) and "lm_head" not in name]


def _switch() -> Any:
    try:
        from dspark_lsp.quant.linear import set_rebuild_path
    except ImportError:
        return None
    return set_rebuild_path


def _rebuild_ms(mats: list[Any], buf: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for m in mats:
        k, n = m.in_features, m.out_features
        tile = max(64, (64 << 20) // (k * 4)) // 8 * 8  # qmm's tile rows
        for n0 in range(0, n, tile):
            t = min(tile, n - n0)
            out = buf[: t * k].view(t, k)
            torch.ops.dspark_q.rebuild_bf16(out, m.kind, m.codes, m.scale, m.off, m.shift, n0)
    return (time.perf_counter() - t0) * 1000


def _same_tiles(model: Any, paths: list[str], use: Any) -> str:
    """Every quantized matrix of the model (the head too) rebuilt tile by tile on each path: the same bits?"""
    from dspark_lsp.quant.linear import QuantLinear

    mats = [m for m in model.modules() if isinstance(m, QuantLinear)]
    differ = 0
    for m in mats:
        k, n = m.in_features, m.out_features
        tile = max(64, (64 << 20) // (k * 4)) // 8 * 8
        for n0 in range(0, n, tile):
            t = min(tile, n - n0)
            outs = []
            for path in paths:
                use(path)
                out = torch.empty(t, k, dtype=torch.bfloat16)
                torch.ops.dspark_q.rebuild_bf16(out, m.kind, m.codes, m.scale, m.off, m.shift, n0)
                outs.append(out.view(torch.int16))
            differ += sum(int((o != outs[0]).sum()) for o in outs[1:])
    return f"{len(mats)} matrices (head included) rebuilt on paths {', '.join(paths)}: {differ} weights differ"


def _slice(model: Any, ids: list[int], keep: int) -> tuple[float, torch.Tensor]:
    from dspark_lsp.engine.kv import forward, new_cache

    cache = new_cache(model)
    t0 = time.perf_counter()
    logits = forward(model, ids, cache, keep=keep)
    return (time.perf_counter() - t0) * 1000, logits


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def main() -> int:
    from dspark_lsp.models.loader import load_causal_lm

    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--sizes", default="64,128,256")
    p.add_argument("--paths", default="rows,fast")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    model, tok = load_causal_lm(args.model, dtype="auto")
    assert torch.ops.dspark_q.prefill_bf16(), "this CPU does not run the bf16 prefill"
    switch = _switch()
    paths = args.paths.split(",") if switch is not None else ["only"]

    def use(path: str) -> None:
        if switch is not None:
            got = switch(path)
            assert got == path, f"asked for {path}, the kernel runs {got}"

    text = open(__file__.replace("rebuild_ab.py", "../../../dspark_lsp/lsp/worker.py")).read()
    ids = tok.encode(text, add_special_tokens=False)[: max(sizes)]
    mats = _matrices(model)
    weights = sum(m.in_features * m.out_features for m in mats)
    buf = torch.empty(max(max(64, (64 << 20) // (m.in_features * 4)) // 8 * 8 * m.in_features for m in mats),
                      dtype=torch.bfloat16)
    print(f"model {args.model}: {len(mats)} matrices, {weights / 1e9:.3f} G weights rebuilt per slice; "
          f"{torch.get_num_threads()} threads", flush=True)
    with torch.inference_mode():
        if switch is not None:
            print(_same_tiles(model, paths, use), flush=True)
        for path in paths:  # logits first (also warms up every path's code and buffers)
            use(path)
            for n in sizes:
                keep = 0 if n == sizes[0] else 1
                _, logits = _slice(model, ids[:n], keep)
                rows = "all rows" if keep == 0 else "last row"
                print(f"hash {path} n={n} ({rows}): {_digest(logits)}", flush=True)
            if switch is not None:
                _rebuild_ms(mats, buf)
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            order = paths if r % 2 == 0 else paths[::-1]
            for path in order + order[::-1]:  # ABBA
                use(path)
                times.setdefault((path, "rebuild"), []).append(_rebuild_ms(mats, buf) if switch else float("nan"))
                for n in sizes:
                    times.setdefault((path, str(n)), []).append(_slice(model, ids[:n], 1)[0])
            print(f"round {r + 1}: " + ", ".join(f"{p} {w} {times[(p, w)][-1]:.0f}" for p in paths
                                              for w in ["rebuild", *map(str, sizes)]), flush=True)
    print(f"\n{args.model}, {args.rounds} rounds ABBA ({2 * args.rounds} samples a path), medians in ms")
    print("| what | " + " | ".join(paths) + (" | new / old (median of pairs) |" if len(paths) == 2 else " |"))
    print("|---|" + "---|" * (len(paths) + (1 if len(paths) == 2 else 0)))
    for w in ["rebuild", *map(str, sizes)]:
        row = f"| {'rebuild alone' if w == 'rebuild' else f'slice of {w} tokens'} | "
        row += " | ".join(f"{statistics.median(times[(p, w)]):.1f}" for p in paths)
        if len(paths) == 2:
            a, b = times[(paths[0], w)], times[(paths[1], w)]
            row += f" | {statistics.median(y / x for x, y in zip(a, b, strict=True)):.3f}"
        print(row + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
