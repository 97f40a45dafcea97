"""The table in README.md from the JSON files here: per run, requests / cancelled, p50 / p95 / mean, the
request right after the window slid (the first whose prompt is 50+ tokens shorter than the one before it)."""
import json
import sys
from pathlib import Path

here = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
for f in sorted(here.glob("*.json")):
    d = json.loads(f.read_text())
    rows = d["per_request"]
    slid = [b for a, b in zip(rows, rows[1:], strict=False)
            if a.get("prompt_tokens") and b.get("prompt_tokens") and b["prompt_tokens"] < a["prompt_tokens"] - 50]
    print(f.stem, d["requests"], d["cancelled"], d["p50_ms"], d["p95_ms"], d["mean_ms"], d["peak_rss_mb"],
          [(r["latency_ms"], r["prefill_tokens"]) for r in slid], d["warm"]["queued"], sep=" | ")
