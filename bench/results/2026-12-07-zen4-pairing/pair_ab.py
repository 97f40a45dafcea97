"""Two panels a pass against one (int8 products with AVX-512), one process, alternating (ABBA) per width.

Usage (repository root, venv active): python bench/results/2026-12-07-zen4-pairing/pair_ab.py MODEL ROUNDS SIZES MIN_A MIN_B
e.g. `... qwen2.5-coder-1.5b 60 3,4 3 5`: forwards of 3 and 4 tokens on 512 cached ones with two panels a pass
from 3 rows (A) and from 5 rows (B). Checks first that both give the same logits; prints per width the median
ms of each and the median of the per-round ratios B / A.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from dspark_lsp.engine.kv import crop, forward, new_cache
from dspark_lsp.models.loader import load_causal_lm
from dspark_lsp.quant.linear import apply_act8

CONTEXT = 512


def main() -> None:
    model_name, rounds = sys.argv[1], int(sys.argv[2])
    sizes = [int(s) for s in sys.argv[3].split(",")]
    modes = {"A": int(sys.argv[4]), "B": int(sys.argv[5])}
    torch.set_num_threads(2)
    model, _ = load_causal_lm(model_name, dtype="gguf")
    assert apply_act8(True), "no int8 products in this build"
    ids = [(i * 7919) % 50_000 for i in range(CONTEXT + max(sizes))]
    took: dict[tuple[str, int], list[float]] = {(m, n): [] for m in modes for n in sizes}
    with torch.inference_mode():
        cache = new_cache(model)
        for s in range(0, CONTEXT, 64):
            forward(model, ids[s : s + 64], cache)
        for n in sizes:
            outs = []
            for rows in modes.values():
                torch.ops.dspark_q.set_act8_pair_min(rows)
                outs.append(forward(model, ids[CONTEXT : CONTEXT + n], cache))
                crop(cache, CONTEXT)
            assert torch.equal(outs[0], outs[1]), f"{n} tokens: pairing changed the logits"
        for r in range(rounds):
            order = list(modes) if r % 2 == 0 else list(modes)[::-1]
            for n in sizes:
                for m in order:
                    torch.ops.dspark_q.set_act8_pair_min(modes[m])
                    t0 = time.perf_counter()
                    forward(model, ids[CONTEXT : CONTEXT + n], cache)
                    took[(m, n)].append(time.perf_counter() - t0)
                    crop(cache, CONTEXT)
    print(f"{model_name}: pairs from {modes['A']} rows (A) vs from {modes['B']} (B), {rounds} rounds; same logits: True")
    print("| tokens | A ms | B ms | B / A |")
    for n in sizes:
        a, b = took[("A", n)], took[("B", n)]
        ratio = statistics.median(y / x for x, y in zip(a, b, strict=True))
        print(f"| {n} | {statistics.median(a) * 1e3:.1f} | {statistics.median(b) * 1e3:.1f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
