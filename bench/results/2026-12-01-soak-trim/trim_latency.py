"""Does malloc_trim after a completion slow the next one? Interleaved A/B in one process, one thread.

The real default pair, loaded and run on one non-main thread (as the server's worker). Requests at line
ends of bench/corpus files, each at a new spot (a full prefill: the kernel's fp32 scratch tiles, the
allocation the trim gives back). Before every odd request the free heap is trimmed (what the server does
after the previous completion); even ones follow an untrimmed heap. Both kinds alternate, so the host's
load falls on both alike. Each request's wall time and the process's CPU time (all threads, user + system:
page faults included; on a host where this job gets a few per cent of a core, wall time mostly measures
waiting) are recorded, and what each trim released. Prints per-request figures and the medians as JSON.

    nice -n 19 python bench/results/2026-12-01-soak-trim/trim_latency.py [N] [MAX_NEW_TOKENS]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

from dspark_lsp.bench.soak import default_files, read_rss_mb
from dspark_lsp.lsp import memory
from dspark_lsp.service import CompletionRequest, CompletionService, ServiceConfig

N = int(sys.argv[1]) if len(sys.argv) > 1 else 24
MAX_NEW = int(sys.argv[2]) if len(sys.argv) > 2 else 16


def spots(n: int) -> list[tuple[Path, str, int]]:
    rng = random.Random(0)
    files = default_files()
    out = []
    while len(out) < n:
        path = rng.choice(files)
        text = path.read_text(encoding="utf-8")
        ends = [i for i, ch in enumerate(text) if ch == "\n" and i > 400]
        if ends:
            out.append((path, text, rng.choice(ends)))
    return out


def main() -> dict[str, object]:
    import os

    pid = os.getpid()
    # calibrate=False: the load's forward timings cost CPU this host does not have; both kinds share it.
    service = CompletionService.load(ServiceConfig(max_new_tokens=MAX_NEW, completion_cache=False, calibrate=False))
    rows = []
    for i, (path, text, offset) in enumerate(spots(N + 2)):
        trim_ms = trim_cpu_ms = released = None
        trimmed = i % 2 == 1
        if trimmed:
            r0, t, c = read_rss_mb(pid) or 0.0, time.perf_counter(), time.process_time()
            memory.release_free_memory()
            trim_ms, trim_cpu_ms = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
            released = round(r0 - (read_rss_mb(pid) or 0.0), 1)
        rss_before = read_rss_mb(pid)
        t, c = time.perf_counter(), time.process_time()
        res = service.complete(CompletionRequest(text=text, offset=offset, path=str(path), doc_key=f"d{i}"))
        ms, cpu_ms = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
        rows.append({"i": i, "trimmed": trimmed, "ms": round(ms, 1), "cpu_ms": round(cpu_ms, 1),
                     "trim_ms": trim_ms and round(trim_ms, 2), "trim_cpu_ms": trim_cpu_ms and round(trim_cpu_ms, 2),
                     "released_mb": released,
                     "prefill_tokens": res.stats.get("prefill_tokens"), "tokens": res.stats.get("tokens"),
                     "rss_before_mb": rss_before and round(rss_before, 1), "rss_after_mb": round(read_rss_mb(pid) or 0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    rows = rows[2:]  # the first two warm the caches up
    out: dict[str, object] = {"n_each": [sum(not r["trimmed"] for r in rows), sum(r["trimmed"] for r in rows)]}
    for key in ("ms", "cpu_ms"):
        a = [r[key] for r in rows if not r["trimmed"]]
        b = [r[key] for r in rows if r["trimmed"]]
        pairs = [rows[k + 1][key] - rows[k][key] for k in range(0, len(rows) - 1, 2)]  # trimmed - untrimmed
        out[f"median_{key}_untrimmed"] = statistics.median(a)
        out[f"median_{key}_after_trim"] = statistics.median(b)
        out[f"median_paired_diff_{key}"] = statistics.median(pairs)
    trims = [r for r in rows if r["trimmed"]]
    return {
        **out,
        "median_trim_ms": statistics.median(r["trim_ms"] for r in trims),
        "median_trim_cpu_ms": statistics.median(r["trim_cpu_ms"] for r in trims),
        "median_released_mb": statistics.median(r["released_mb"] for r in trims),
        "max_new_tokens": MAX_NEW,
    }


if __name__ == "__main__":
    result: dict[str, object] = {}
    t = threading.Thread(target=lambda: result.update(main()), name="dspark-worker")
    t.start()
    t.join()
    print(json.dumps(result))
