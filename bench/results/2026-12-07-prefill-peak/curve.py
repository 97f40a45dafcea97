"""The 1.5B's forward of 1/2/4/6/8 tokens on 256 cached, with pairs of panels from P rows (set_act8_pair_min),
settings alternated round by round; medians. Usage: python curve.py 6 4 3"""
import statistics
import sys
import time

import torch

from dspark_lsp.engine.kv import crop, forward, new_cache
from dspark_lsp.models.loader import load_causal_lm

model, _ = load_causal_lm("qwen2.5-coder-1.5b")
ids = torch.randint(0, 150000, (256,)).tolist()
cache = new_cache(model)
op = torch.ops.dspark_q.set_act8_pair_min
settings = [int(a) for a in sys.argv[1:]] or [6, 4]
widths = (1, 2, 4, 6, 8)
times: dict[tuple[int, int], list[float]] = {(s, w): [] for s in settings for w in widths}
with torch.inference_mode():
    forward(model, ids, cache)
    for rnd in range(12):
        for s in settings if rnd % 2 == 0 else settings[::-1]:
            op(s)
            for w in widths:
                t0 = time.perf_counter()
                forward(model, ids[:w], cache)
                times[(s, w)].append(time.perf_counter() - t0)
                crop(cache, 256)
op(6)
for s in settings:
    med = {w: statistics.median(times[(s, w)][2:]) * 1000 for w in widths}
    print(f"pair from {s}: " + " ".join(f"{w}:{med[w]:.1f}" for w in widths)
          + f"  4/1 {med[4] / med[1]:.3f}  8/1 {med[8] / med[1]:.3f}")
