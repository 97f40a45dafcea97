"""int16 against int8 activations (DSPARK_ACT8) on one loaded model, timed in one process:
`python -m dspark_lsp.quant.act8_ab --model qwen2.5-coder-1.5b --sizes 1,2,4,8`.

The two paths share the model's weights (the int8 products read the same panels), so the model is loaded
once and the kernel's process-wide switch (``apply_act8``) is flipped between forwards. Each round times a
forward of every size on a KV cache of ``--context`` tokens under both paths in ABBA order, so a shared,
loaded host slows both alike. Prints, per size: the median ms of each path, the median of the per-round
ratios int8 / int16, and the verify curve (n-token forward over the same round's 1-token forward, median
over rounds) of each path; before timing, the largest |logit| difference between the paths and whether
each path's n-token forward gives, bit for bit, the rows of n one-token forwards (batch invariance).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from dspark_lsp.quant.linear import act8_available, apply_act8

PATHS = ("int16", "int8")


def _load(spec: str) -> Any:
    from dspark_lsp.models.loader import load_causal_lm

    model, _ = load_causal_lm(spec, dtype="gguf")
    return model


def _set(path: str) -> None:
    on = apply_act8(path == "int8")
    assert on == (path == "int8"), "the kernel did not switch paths"


def _check(model: Any, ids: list[int], context: int, sizes: list[int], cache: Any) -> None:
    """Per width: n one-token forwards give the n-token forward's rows bit for bit on both paths, and how far
    the paths' logits are apart."""
    from dspark_lsp.engine.kv import crop, forward

    for n in sizes:
        step = ids[context : context + n]
        outs: dict[str, torch.Tensor] = {}
        for path in PATHS:
            _set(path)
            outs[path] = forward(model, step, cache)
            crop(cache, context)
            ones = []
            for i in range(n):  # one token at a time: the same rows bit for bit (batch invariance)
                ones.append(forward(model, step[i : i + 1], cache))
            crop(cache, context)
            same = torch.equal(torch.cat(ones, dim=-2), outs[path])
            print(f"n={n} {path}: {n} one-token forwards equal the {n}-token forward: {same}")
        diff = float((outs["int8"] - outs["int16"]).abs().max())
        top = bool(torch.equal(outs["int8"].argmax(-1), outs["int16"].argmax(-1)))
        print(f"n={n}: max |logit int8 - int16| {diff:.4f}, same argmax at every row: {top}", flush=True)


def _time(model: Any, ids: list[int], context: int, sizes: list[int], cache: Any,
          rounds: int) -> dict[tuple[str, int], list[float]]:
    """Forward times in ms per (path, width), both paths in ABBA order each round."""
    from dspark_lsp.engine.kv import crop, forward

    times: dict[tuple[str, int], list[float]] = {(path, n): [] for path in PATHS for n in sizes}
    for r in range(rounds):
        for n in sizes:
            step = ids[context : context + n]
            order = list(PATHS) if r % 2 == 0 else list(PATHS)[::-1]
            for path in order + order[::-1]:  # ABBA
                _set(path)
                t0 = time.perf_counter()
                forward(model, step, cache)
                times[(path, n)].append((time.perf_counter() - t0) * 1000)
                crop(cache, context)
    return times


def _report(times: dict[tuple[str, int], list[float]], sizes: list[int]) -> None:
    print("| tokens | int16 ms | int8 ms | int8/int16 (median of pairs) | int16 curve n/1 | int8 curve n/1 |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        a, b = times[("int16", n)], times[("int8", n)]
        pair = statistics.median(y / x for x, y in zip(a, b, strict=True))
        curve = {path: statistics.median(t / o for t, o in zip(times[(path, n)], times[(path, 1)], strict=True))
                 for path in PATHS}
        print(f"| {n} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | {pair:.3f} | "
              f"{curve['int16']:.3f} | {curve['int8']:.3f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    from dspark_lsp.engine.kv import forward, new_cache

    p = argparse.ArgumentParser(prog="python -m dspark_lsp.quant.act8_ab", description=__doc__)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--sizes", default="1,2,4,8", help="forward widths (tokens), comma-separated; 1 first")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes[0] != 1:
        p.error("--sizes must start with 1 (the verify curve is over the 1-token forward)")
    model = _load(args.model)
    if not act8_available():
        print("this kernel build has no int8 products")
        return 1
    vocab = int(model.config.vocab_size)
    ids = [(i * 7919) % min(vocab, 50_000) for i in range(args.context + max(sizes))]
    cache = new_cache(model)
    with torch.inference_mode():
        _set("int16")  # the prefill (many rows) does not use the switch; one cache serves both paths
        forward(model, ids[: args.context], cache, keep=1)
        _check(model, ids, args.context, sizes, cache)
        times = _time(model, ids, args.context, sizes, cache, args.rounds)
    _set("int16")
    print(f"model {args.model}, context {args.context}, {args.rounds} rounds ({2 * args.rounds} forwards a path "
          f"and size, ABBA)")
    _report(times, sizes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
