"""Achieved rate of the int8 row products on two of the 1.5B's matrices at 256 / 64 / 8 / 4 / 1 rows
(medians of repeated calls; the matrix stays in cache at few rows), to set against peak.cpp's figure."""
import time

import torch

from dspark_lsp.models.loader import load_causal_lm

model, _ = load_causal_lm("qwen2.5-coder-1.5b")
layer = model.model.layers[3]
torch.manual_seed(0)
for name, mod in (("down_proj", layer.mlp.down_proj), ("o_proj", layer.self_attn.o_proj)):
    K, N = mod.in_features, mod.out_features
    for rows in (256, 64, 8, 4, 1):
        x = torch.randn(1, rows, K)
        with torch.inference_mode():
            mod(x)
            ts = []
            for _ in range(7 if rows > 8 else 30):
                t0 = time.perf_counter()
                mod(x)
                ts.append(time.perf_counter() - t0)
        t = sorted(ts)[len(ts) // 2]
        print(f"{name} ({type(mod).__name__}, kind {getattr(mod, 'kind', '?')}) K={K} N={N} rows={rows}: "
              f"{t * 1e3:.2f} ms, {2 * K * N * rows / t / 1e9:.0f} GOPS")
