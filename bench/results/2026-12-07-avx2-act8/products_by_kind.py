"""Per matrix kind: the 1.5B's products at 1 / 4 / 8 rows, int16 against int8 activations.

One pass runs every one of the model's 141 quantized matrices once (so their weights stream from memory as in
a forward); 6 passes a path, the paths alternating. Prints ms per pass (mean), summed over the layers of each
kind. Run from the repository root: DSPARK_KERNEL_MARCH=x86-64-v3 python bench/results/2026-12-07-avx2-act8/products_by_kind.py
"""

from __future__ import annotations

import collections
import time

import torch

from dspark_lsp.models.loader import load_causal_lm
from dspark_lsp.quant.linear import QuantLinear, apply_act8

PASSES = 6


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_causal_lm("qwen2.5-coder-1.5b", dtype="gguf")
    lins = [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear)]
    print(len(lins), "quantized matrices; VNNI build:", bool(torch.ops.dspark_q.act8_vnni()))
    for rows in (1, 4, 8):
        took: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"int16": 0.0, "int8": 0.0})
        xs: dict[int, torch.Tensor] = {}
        for rep in range(PASSES):
            for path in ("int16", "int8") if rep % 2 else ("int8", "int16"):
                apply_act8(path == "int8")
                for name, lin in lins:
                    x = xs.setdefault(lin.in_features, torch.randn(rows, lin.in_features))
                    t0 = time.perf_counter()
                    lin(x)
                    took[f"{name.split('.')[-1]}:kind{lin.kind}"][path] += time.perf_counter() - t0
        print(f"{rows} rows")
        for key, t in sorted(took.items()):
            print(f"  {key:28s} int16 {t['int16'] / PASSES * 1e3:7.2f} ms  int8 {t['int8'] / PASSES * 1e3:7.2f} ms")
        total = {p: sum(t[p] for t in took.values()) / PASSES * 1e3 for p in ("int16", "int8")}
        print(f"  all: int16 {total['int16']:.1f} ms, int8 {total['int8']:.1f} ms")


if __name__ == "__main__":
    main()
