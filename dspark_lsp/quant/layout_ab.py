"""Two kernel layouts of one model, timed in one process:
`python -m dspark_lsp.quant.layout_ab --model qwen2.5-coder-1.5b --layouts compact,six`.

Layouts (:data:`LAYOUTS`, the environment each is loaded under): ``fp32-scales`` (an fp32 scale per
group for every type), ``compact`` (K-quants with their integer sub-block scales, Q6_K codes a byte each),
``six`` (compact, Q6_K codes in 6 bits), ``half`` (compact, fp16 scales for Q8_0, Q5_0, Q4_0),
``six+half`` (both). Loads the model once per layout, checks that both give the same
logits bit for bit, then times n-token forwards on a KV cache of ``--context`` tokens, alternating the
two models (ABBA order per round) so that a shared, loaded host slows both alike. Prints the weight
bytes each forward reads, the median ms per layout and the median of the per-round ratios (second
layout over first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch

from dspark_lsp.quant.linear import ENV_COMPACT, ENV_HALF, ENV_SIX, QuantLinear

LAYOUTS: dict[str, dict[str, str]] = {
    "fp32-scales": {ENV_COMPACT: "0", ENV_SIX: "0", ENV_HALF: "0"},
    "compact": {ENV_COMPACT: "1", ENV_SIX: "0", ENV_HALF: "0"},
    "six": {ENV_COMPACT: "1", ENV_SIX: "1", ENV_HALF: "0"},
    "half": {ENV_COMPACT: "1", ENV_SIX: "0", ENV_HALF: "1"},
    "six+half": {ENV_COMPACT: "1", ENV_SIX: "1", ENV_HALF: "1"},
}


def weight_bytes(model: Any) -> int:
    """Bytes of quantized weights one forward's products read (every QuantLinear once; embedding
    lookups read a row or two and are left out)."""
    seen = {id(m): m for m in model.modules() if isinstance(m, QuantLinear)}
    total = 0
    for m in seen.values():
        for name in ("codes", "scale", "off"):
            t: torch.Tensor = getattr(m, name)
            total += t.numel() * t.element_size()
    return total


def _load(spec: str, layout: str) -> Any:
    from dspark_lsp.models.loader import load_causal_lm

    env = LAYOUTS[layout]
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        model, _ = load_causal_lm(spec, dtype="gguf")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return model


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.engine.kv import crop, forward, new_cache

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.quant.layout_ab", description=__doc__)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--sizes", default="1", help="forward widths (tokens), comma-separated")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--layouts", default="fp32-scales,compact", help=f"two of {', '.join(LAYOUTS)}")
    args = p.parse_args(argv)
    first, second = args.layouts.split(",")
    if first == second or first not in LAYOUTS or second not in LAYOUTS:
        p.error(f"--layouts takes two different names of {', '.join(LAYOUTS)}")
    models = {first: _load(args.model, first), second: _load(args.model, second)}
    for name, m in models.items():
        print(f"{name}: {weight_bytes(m) / 2**20:,.0f} MiB of weights per forward")
    vocab = int(models[second].config.vocab_size)
    ids = [(i * 7919) % min(vocab, 50_000) for i in range(args.context + 16)]
    caches = {}
    with torch.inference_mode():
        logits = {}
        for name, m in models.items():
            caches[name] = new_cache(m)
            logits[name] = forward(m, ids[: args.context], caches[name], keep=1)
        a, b = (logits[k] for k in models)
        print(f"same prefill logits bit for bit: {torch.equal(a, b)}")
        for n in (int(s) for s in args.sizes.split(",")):
            step = ids[args.context : args.context + n]
            outs = {name: forward(m, step, caches[name]) for name, m in models.items()}
            for c in caches.values():
                crop(c, args.context)
            same = torch.equal(*outs.values())
            times: dict[str, list[float]] = {name: [] for name in models}
            for r in range(args.rounds):
                order = list(models) if r % 2 == 0 else list(models)[::-1]
                for name in order + order[::-1]:  # ABBA
                    t0 = time.perf_counter()
                    forward(models[name], step, caches[name])
                    times[name].append((time.perf_counter() - t0) * 1000)
                    crop(caches[name], args.context)
            old, new = times[first], times[second]
            ratios = [n_ / o_ for o_, n_ in zip(old, new, strict=True)]
            print(f"n={n}: {first} {statistics.median(old):.1f} ms, {second} {statistics.median(new):.1f} ms "
                  f"(medians of {len(old)}), {second}/{first} median ratio {statistics.median(ratios):.3f}; "
                  f"same logits: {same}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
