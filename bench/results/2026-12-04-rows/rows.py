"""Where the 1.5B's multi-row forward goes: every distinct quantized product of the model (kernel kind,
GGUF type, N x K), timed alone at 1, 2, 4 and 8 rows (median of R calls, 2 threads), and multiplied by how
many of it one forward runs. python rows.py MODEL > rows.txt
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import torch

from dspark_lsp.models.loader import load_causal_lm
from dspark_lsp.quant.linear import QuantLinear

ROWS = (1, 2, 4, 8)
REPEATS = 40


def time_ms(mod: Any, m: int) -> float:
    x = torch.randn(m, mod.in_features)
    for _ in range(3):
        mod.run(x)
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        mod.run(x)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_causal_lm(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b")
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for mod in {id(m): m for m in model.modules() if isinstance(m, QuantLinear)}.values():
        groups[(mod.kind, str(mod.source_type), mod.out_features, mod.in_features)].append(mod)
    total = dict.fromkeys(ROWS, 0.0)
    print(f"{'kind':>5} {'type':>12} {'N':>7} {'K':>6} {'count':>5} " + " ".join(f"{m:>3}-row ms" for m in ROWS)
          + "   4/1")
    with torch.inference_mode():
        for key, mods in sorted(groups.items(), key=lambda kv: -kv[0][2] * kv[0][3] * len(kv[1])):
            ms = {m: time_ms(mods[0], m) for m in ROWS}
            for m in ROWS:
                total[m] += ms[m] * len(mods)
            print(f"{key[0]:>5} {key[1][-12:]:>12} {key[2]:>7} {key[3]:>6} {len(mods):>5} "
                  + " ".join(f"{ms[m]:>10.3f}" for m in ROWS) + f"  {ms[4] / ms[1]:.2f}", flush=True)
    print("sum over one forward's products (ms): " + ", ".join(f"{m} rows {total[m]:.1f}" for m in ROWS)
          + f"; 4/1 = {total[4] / total[1]:.2f}")


if __name__ == "__main__":
    main()
