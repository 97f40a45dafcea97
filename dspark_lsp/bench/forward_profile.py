"""Where one target forward's time goes: `python -m dspark_lsp.bench.forward_profile [--model M]`.

Times forwards of n tokens on a KV cache of ``--context`` tokens (as a decode / verify step does), plain
and then under the torch profiler, which splits the (profiled, so inflated) wall time into: the quantized (or fp32) matmuls, attention, KV-cache
writes, the rest of the ops (norms, rotary, activations, copies), and what no op accounts for — Python and
dispatch overhead of the model code. Medians over ``--repeats`` forwards.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

# profiler op name -> bucket (first match wins). dspark_q::decoder_layer (a whole layer of a decode/verify
# forward, quant/decoder_layer.cpp) calls the products directly, not through the dispatcher: its self time
# is those products (plus its few microseconds of C++), while its norms, rotary, attention and cache writes
# are ATen ops the profiler records as its children, in their own buckets.
_BUCKETS = (
    ("matmul", ("dspark_q::qmm", "dspark_q::decoder_layer", "aten::addmm", "aten::mm", "aten::linear", "mkldnn::_linear_pointwise",
                "aten::matmul", "aten::bmm")),
    ("attention", ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product")),
    ("kv_cache", ("aten::copy_", "aten::cat", "aten::index_put_", "aten::slice_scatter")),
)


def _bucket(name: str) -> str:
    for bucket, prefixes in _BUCKETS:
        if name.startswith(prefixes):
            return bucket
    return "other_ops"


def profile_forward(model: Any, n: int, context: int = 256, repeats: int = 7) -> dict[str, float]:
    """Median ms per bucket (and 'wall', 'overhead') for one forward of ``n`` tokens."""
    from torch.profiler import ProfilerActivity, profile

    from dspark_lsp.engine.kv import crop, forward, new_cache

    vocab = int(getattr(model.config, "vocab_size", 1000))
    ids = [(i * 7919) % min(vocab, 50_000) for i in range(context + n)]
    cache = new_cache(model)
    forward(model, ids[:context], cache, keep=1)
    forward(model, ids[context : context + n], cache)  # warm this shape once
    crop(cache, context)
    plain: list[float] = []
    for _ in range(repeats):  # wall time without the profiler, whose per-op cost inflates its own wall
        t0 = time.perf_counter()
        forward(model, ids[context : context + n], cache)
        plain.append((time.perf_counter() - t0) * 1000)
        crop(cache, context)
    rows: list[dict[str, float]] = []
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            forward(model, ids[context : context + n], cache)
            wall = (time.perf_counter() - t0) * 1000
        crop(cache, context)
        out = {"wall": wall, "matmul": 0.0, "attention": 0.0, "kv_cache": 0.0, "other_ops": 0.0}
        for evt in prof.key_averages():
            if evt.key.startswith("aten::") or evt.key.startswith(("dspark_q::", "mkldnn::")):
                out[_bucket(evt.key)] += evt.self_cpu_time_total / 1000
        out["overhead"] = max(0.0, wall - sum(out[k] for k in ("matmul", "attention", "kv_cache", "other_ops")))
        rows.append(out)
    out = {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}
    out["plain_wall"] = round(statistics.median(plain), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.models.gguf_target import weights_kind
    from dspark_lsp.models.loader import load_causal_lm

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.bench.forward_profile", description=__doc__)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--dtype", default="auto", help="auto (GGUF blocks on the CPU), gguf, float32")
    p.add_argument("--sizes", default="1,2,4,6,8")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", dest="json_out", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_causal_lm(args.model, dtype=args.dtype)
    weights = weights_kind(model)
    results = {}
    print(f"model={args.model} weights={weights} context={args.context} (ms, median of {args.repeats}; "
          f"profiler on, so wall is a little above a plain forward)")
    print(f"{'n':>3} {'plain':>8} | profiled: {'wall':>8} {'matmul':>8} {'attn':>8} {'kv':>8} {'ops':>8} {'overhead':>9}")
    for n in (int(x) for x in args.sizes.split(",")):
        r = profile_forward(model, n, args.context, args.repeats)
        results[n] = r
        print(f"{n:>3} {r['plain_wall']:>8.1f} |           {r['wall']:>8.1f} {r['matmul']:>8.1f} {r['attention']:>8.1f} {r['kv_cache']:>8.1f} "
              f"{r['other_ops']:>8.1f} {r['overhead']:>9.1f}", flush=True)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump({"model": args.model, "weights": weights, "context": args.context, "ms": results}, fh,
                      indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
