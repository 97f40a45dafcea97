"""The replay arms side by side: python bench/results/2026-12-08-cpu-threads/summary.py"""
import collections
import json
import re
import statistics
from pathlib import Path

here = Path(__file__).parent
pooled: dict[str, list[tuple[float, bool]]] = collections.defaultdict(list)
print(f"{'run':<16} {'requests':>8} {'p50 ms':>8} {'p95 ms':>8} {'first ms':>9} {'errors':>6} {'cancelled':>9}  threads")
for path in sorted(here.glob("*-s*.json")):
    d = json.loads(path.read_text())
    decoded = [r for r in d["per_request"] if not r.get("from_cache")]
    threads = dict(collections.Counter(r.get("threads", "-") for r in decoded))
    print(f"{path.stem:<16} {d['requests']:>8} {d['p50_ms']:>8.1f} {d['p95_ms']:>8.1f} {d['first_ms']:>9.1f} "
          f"{d['errors']:>6} {d['cancelled']:>9}  {threads}")
    arm = re.sub(r"-s\d+", "", path.stem)  # busy-new-s0-plans -> busy-new-plans
    pooled[arm] += [(r["latency_ms"], bool(r.get("from_cache"))) for r in d["per_request"]]


def nearest_rank(values: list[float], q: float) -> float:
    """The replay's own percentile rule (bench/lsp_replay.py)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


print("\npooled over seeds (every completed request; the decoded ones' mean apart from typed-through hits):")
for arm, rows in sorted(pooled.items()):
    lat = [ms for ms, _ in rows]
    decoded = [ms for ms, cached in rows if not cached]
    print(f"{arm:<10} n={len(lat):>3} p50 {nearest_rank(lat, 0.5):7.1f} ms  p95 {nearest_rank(lat, 0.95):7.1f} ms  "
          f"decoded mean {statistics.fmean(decoded):7.1f} ms (n={len(decoded)})")
