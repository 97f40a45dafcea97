"""What finishing a stopped slice saves a request, on the real model, both ways in one process.

Each trial: a prefix cache holding the first 256 tokens of a file (as an earlier warm-up left it); a
background warm-up of the first 512 tokens in 64-token slices, stopped by a timer at a random moment of
its second slice (as a keystroke stops it); then the request, the first 520 tokens (the user typed on),
decoding one token. Arm "resume" keeps the stopped slice (the engine as it is); arm "drop" forgets it
first (as before engine/resume.py). Both arms start from copies of what the same stopped warm-up left,
in alternating order, so the host's drift falls on both. Printed per trial: the request's prefill tokens, rows
resumed, prefill ms; and the medians. Usage (repository root, venv active):

    python bench/results/2026-12-07-resume/stopped_slice_ab.py [--model M] [--trials N] [--seed S]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import threading
import time
from pathlib import Path

import torch

from dspark_lsp.engine.config import DecodeConfig
from dspark_lsp.engine.decode import SpeculativeDecoder
from dspark_lsp.engine.prefix_cache import PrefixCache
from dspark_lsp.models.loader import load_causal_lm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    model, tok = load_causal_lm(args.model)
    text = Path("dspark_lsp/lsp/worker.py").read_text()
    ids = tok(text, add_special_tokens=False).input_ids[:520]
    assert len(ids) == 520
    engine = SpeculativeDecoder(model)
    base = PrefixCache(max_entries=4, max_tokens=8192)
    engine.prefix_cache = base
    engine.generate(ids[:257], config=DecodeConfig(max_new_tokens=0, prefill_chunk=64))  # cache covers 256
    entry = next(iter(base._entries.values()))
    stored_ids, stored_cache = list(entry.ids), entry.cache

    def fresh() -> PrefixCache:  # the same stored cache, a copy per run
        pc = PrefixCache(max_entries=4, max_tokens=8192)
        pc.put(list(stored_ids), copy.deepcopy(stored_cache))
        return pc

    # the time of one 64-token slice, to place the stops inside the second slice
    engine.prefix_cache = fresh()
    t0 = time.perf_counter()
    engine.generate(ids[:321], config=DecodeConfig(max_new_tokens=0, prefill_chunk=64))
    slice_s = time.perf_counter() - t0
    print(f"one 64-token slice: {slice_s * 1000:.0f} ms")
    rows: list[dict[str, object]] = []
    for trial in range(args.trials):
        at = rng.uniform(0.15, 0.95)  # how far into the second slice the keystroke comes
        engine.prefix_cache = fresh()
        engine._partial = None
        cancel = threading.Event()
        timer = threading.Timer(slice_s * (1 + at), cancel.set)
        timer.start()
        warm = engine.generate(ids[:513], config=DecodeConfig(max_new_tokens=0, prefill_chunk=64), cancel=cancel)
        timer.cancel()
        partial = engine._partial
        if partial is None:  # the flag fell between two slices: nothing stopped half-way to compare
            print(json.dumps({"trial": trial, "stop_at": round(at, 2), "stopped_layer": None}), flush=True)
            continue
        # What the warm-up left (the stored caches and the stopped slice), given to both arms alike.
        kept = [(list(e.ids), e.cache) for e in engine.prefix_cache._entries.values()]
        for arm in (("resume", "drop") if trial % 2 == 0 else ("drop", "resume")):
            pc = PrefixCache(max_entries=4, max_tokens=8192)
            for kept_ids, kept_cache in kept:
                pc.put(kept_ids, copy.deepcopy(kept_cache))
            engine.prefix_cache = pc
            engine._partial = partial if arm == "resume" else None
            res = engine.generate(ids, config=DecodeConfig(max_new_tokens=1))  # the request's default slices
            row = {"trial": trial, "arm": arm, "stop_at": round(at, 2), "warm": warm.stats.stop_reason,
                   "stopped_layer": partial.layer, "prefill_tokens": res.stats.prefill_tokens,
                   "resumed": res.stats.resumed_tokens, "reused": res.stats.reused_tokens,
                   "prefill_ms": round(res.stats.t_prefill * 1000, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for arm in ("resume", "drop"):
        ms = [float(r["prefill_ms"]) for r in rows if r["arm"] == arm]
        summary[arm] = {"median_ms": round(statistics.median(ms), 1), "mean_ms": round(statistics.fmean(ms), 1)}
    pairs = [float(a["prefill_ms"]) / float(b["prefill_ms"]) for a in rows for b in rows
             if a["trial"] == b["trial"] and a["arm"] == "resume" and b["arm"] == "drop"]
    summary["resume_over_drop_median"] = round(statistics.median(pairs), 3)
    summary["threads"] = torch.get_num_threads()
    summary["slice_ms"] = round(slice_s * 1000, 1)
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
