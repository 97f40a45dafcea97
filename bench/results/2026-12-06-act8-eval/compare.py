"""Hole by hole, int16 against int8 activations, per model: pass@1 per set, holes whose text differs, holes
that pass on one path only, and cold latency p50. Usage: compare.py DIR"""
import json
import sys
from pathlib import Path

here = Path(sys.argv[1])
for model in ("default", "qwen2.5-coder-1.5b"):
    runs = {}
    for act8 in ("0", "1"):
        f = here / f"{model}-act8-{act8}.json"
        if f.exists():
            runs[act8] = {p["id"]: p for p in json.loads(f.read_text())["problems"]}
    if len(runs) < 2:
        continue
    a, b = runs["0"], runs["1"]
    print(model)
    for s in ("humaneval-single", "humaneval-multi", "humaneval-span"):
        ids = [i for i in a if a[i]["set"] == s]
        pa = sum(a[i]["attempts"]["service"]["passed"] for i in ids)
        pb = sum(b[i]["attempts"]["service"]["passed"] for i in ids)
        lat = {k: sorted(r[i]["attempts"]["service"]["latency_ms"] for i in ids) for k, r in runs.items()}
        print(f"  {s:17s} pass int16 {pa}/{len(ids)} int8 {pb}/{len(ids)}  p50 ms int16 {lat['0'][len(ids) // 2]:.0f} "
              f"int8 {lat['1'][len(ids) // 2]:.0f}")
    differ = [i for i in a if a[i]["attempts"]["service"]["text"] != b[i]["attempts"]["service"]["text"]]
    only16 = [i for i in a if a[i]["attempts"]["service"]["passed"] and not b[i]["attempts"]["service"]["passed"]]
    only8 = [i for i in a if b[i]["attempts"]["service"]["passed"] and not a[i]["attempts"]["service"]["passed"]]
    print(f"  texts differ on {len(differ)} of {len(a)} holes; pass with int16 only: {only16}; with int8 only: {only8}")
