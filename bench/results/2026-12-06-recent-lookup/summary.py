"""One line per replay JSON in a folder: requests, cancelled, p50/p95 of all requests, the first after the
open, peak RSS, answers from the typed-through cache, and over the decoded requests: the p50, the tokens and
target forwards summed, and their ratio. Usage: summary.py DIR"""
import json
import sys
from pathlib import Path

for f in sorted(Path(sys.argv[1]).glob("*.json")):
    d = json.loads(f.read_text())
    rows = [r for r in d["per_request"] if not r.get("from_cache")]
    tokens = sum(r["tokens"] for r in rows)
    forwards = sum(r["target_forwards"] for r in rows)
    lat = sorted(r["latency_ms"] for r in rows)
    print(f"{f.stem:34s} req {d['requests']:3d} cancelled {d['cancelled']} p50 {d['p50_ms']:7.1f} p95 {d['p95_ms']:7.1f} "
          f"first {d['first_ms']} rss {d['peak_rss_mb']:.0f} cache {d['service']['from_cache']} | decoded {len(rows)} "
          f"p50 {lat[len(lat) // 2]:.0f} tokens {tokens} forwards {forwards} tok/fw {tokens / max(1, forwards):.3f}")
