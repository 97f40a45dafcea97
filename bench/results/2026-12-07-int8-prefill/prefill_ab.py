"""A prompt's prefill through the int8 row products against the rebuilt-weight GEMM, one process.

    python prefill_ab.py --model qwen2.5-coder-1.5b --tokens 256 --rounds 6 [--blocks 64,256]

Loads the target (dtype auto), then per round prefills the same prompt (the first --tokens tokens of
dspark_lsp/lsp/worker.py) on a fresh cache with the GEMM (bf16 where the CPU has native bf16 and
DSPARK_PREFILL is not fp32, else fp32) and with int8 rows in each block size, in alternating order.
Prints the median ms per path, ms per token, the median of the per-round ratios int8 / GEMM, and how far
the last row's logits are apart (and whether their argmax agrees).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from dspark_lsp.engine.kv import forward, new_cache
from dspark_lsp.models.loader import PREFILL_ENV, cpu_has_native_bf16, load_causal_lm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--blocks", default="64,256")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model, tok = load_causal_lm(args.model, dtype="auto")
    gemm = "bf16" if cpu_has_native_bf16() and os.environ.get(PREFILL_ENV, "auto") != "fp32" else "fp32"
    root = Path(__file__).resolve().parents[3]
    ids = tok((root / "dspark_lsp/lsp/worker.py").read_text())["input_ids"][: args.tokens]
    paths = [gemm] + [f"int8/{b}" for b in args.blocks.split(",")]
    print(f"model {args.model}, {len(ids)} tokens, act8_vnni {bool(torch.ops.dspark_q.act8_vnni())}, GEMM {gemm}")

    def run(path: str) -> tuple[float, torch.Tensor]:
        torch.ops.dspark_q.set_prefill_bf16(path == "bf16")
        torch.ops.dspark_q.set_prefill_int8(int(path.split("/")[1]) if path.startswith("int8") else 0)
        cache = new_cache(model)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = forward(model, ids, cache, keep=1)
        return time.perf_counter() - t0, out.reshape(-1, out.shape[-1])[-1].float()

    times: dict[str, list[float]] = {p: [] for p in paths}
    last: dict[str, torch.Tensor] = {}
    run(paths[0])  # warm-up
    for r in range(args.rounds):
        for p in paths if r % 2 == 0 else paths[::-1]:
            dt, last[p] = run(p)
            times[p].append(dt)
    for p in paths:
        med = statistics.median(times[p]) * 1000
        ratio = statistics.median(a / b for a, b in zip(times[p], times[gemm], strict=True))
        diff = float((last[p] - last[gemm]).abs().max())
        same = int(last[p].argmax()) == int(last[gemm].argmax())
        print(f"{p:>9}: median {med:7.0f} ms  {med / len(ids):6.2f} ms/token  / {gemm} {ratio:.3f}  "
              f"max |logit diff| {diff:.3f}  same argmax {same}  all {[round(t * 1000) for t in times[p]]}")


if __name__ == "__main__":
    main()
