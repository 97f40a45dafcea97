"""One row per replay: python summary.py [DIR] (the JSON files run.sh wrote)."""

from __future__ import annotations

import glob
import json
import statistics
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "."
print("run | p50 | p95 | mean | first | warm tokens | draft ms / request (mean) | tokens / request | peak RSS MB")
for f in sorted(glob.glob(f"{d}/*.json")):
    r = json.load(open(f))
    rows = [x for x in r.get("per_request", []) if not x.get("from_cache")]
    draft = statistics.mean(x.get("t_draft_ms", 0.0) for x in rows) if rows else 0.0
    toks = statistics.mean(x.get("tokens", 0) for x in rows) if rows else 0.0
    print(f"{f.split('/')[-1][:-5]} | {r['p50_ms']} | {r['p95_ms']} | {r['mean_ms']} | {r['first_ms']} | "
          f"{r['warm']['tokens']} | {draft:.1f} | {toks:.1f} | {r['peak_rss_mb']}")
