"""One arm: THREADS and GOMP_SPINCOUNT from the environment (libgomp reads the latter when torch loads it).
Prints the fastest of three medians of 10 forwards of 1 and 4 tokens on 256 cached tokens, and the faster
of two 128-token prefills, in ms."""
# ruff: noqa: I001  (the package's environment settings go in before torch loads)
import json
import os
import statistics
import time

import dspark_lsp  # noqa: F401
import torch
from dspark_lsp.engine.kv import crop, forward, new_cache
from dspark_lsp.models.loader import load_causal_lm

torch.set_num_threads(int(os.environ.get("THREADS", "2")))
model, _ = load_causal_lm(os.environ.get("MODEL", "qwen2.5-coder-1.5b"))
ids = [(i * 7919) % 50000 for i in range(600)]
c = new_cache(model)
forward(model, ids[:256], c, keep=1)
res = {}
for n in (1, 4):
    meds = []
    for _ in range(3):
        ts = []
        for _ in range(10):
            t0 = time.perf_counter()
            forward(model, ids[256:256 + n], c)
            ts.append((time.perf_counter() - t0) * 1000)
            crop(c, 256)
        meds.append(statistics.median(ts))
    res[f"f{n}"] = round(min(meds), 1)
pt = []
for _ in range(2):
    c2 = new_cache(model)
    t0 = time.perf_counter()
    forward(model, ids[300:428], c2, keep=1)
    pt.append((time.perf_counter() - t0) * 1000)
res["prefill128"] = round(min(pt))
print(json.dumps({"spin": os.environ.get("GOMP_SPINCOUNT"), "threads": torch.get_num_threads(), **res}), flush=True)
