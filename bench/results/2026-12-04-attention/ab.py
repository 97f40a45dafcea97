"""One process's forward times on a KV cache of C tokens, for a kernel A/B (run.sh alternates trees).

python ab.py MODEL OUT.json [CONTEXTS [ROWS]]: for each context C and row count n (comma lists, default
256,1024 and 1,4), the median of R plain forwards of n tokens on a C-token cache (cropped back after each),
and a hash of the logits (the two kernels must agree bit for bit: the attention change keeps the old
arithmetic and order; ../2026-12-04-rows/ uses it for the chain count, which changes no integer sum).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time

import torch

from dspark_lsp.engine.kv import crop, forward, new_cache
from dspark_lsp.models.loader import load_causal_lm

REPEATS = 15


def main() -> None:
    model_name, out = sys.argv[1], sys.argv[2]
    contexts = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "256,1024").split(",")]
    rows = [int(x) for x in (sys.argv[4] if len(sys.argv) > 4 else "1,4").split(",")]
    torch.set_num_threads(2)
    model, _ = load_causal_lm(model_name)
    vocab = int(model.config.vocab_size)
    ids = [(i * 7919) % min(vocab, 50_000) for i in range(max(contexts) + max(rows))]
    res: dict[str, dict[str, float | str]] = {}
    for c in contexts:
        cache = new_cache(model)
        forward(model, ids[:c], cache, keep=1)
        for n in rows:
            step = ids[c : c + n]
            logits = forward(model, step, cache)
            crop(cache, c)
            times = []
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                forward(model, step, cache)
                times.append((time.perf_counter() - t0) * 1000)
                crop(cache, c)
            digest = hashlib.sha256(logits.float().contiguous().numpy().tobytes()).hexdigest()[:16]
            res[f"c{c}_n{n}"] = {"ms": round(statistics.median(times), 2), "logits": digest}
            print(model_name, c, n, res[f"c{c}_n{n}"], flush=True)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
