"""Median over rounds of each arm's forward ms, and whether the two kernels' logits agree:
python summary.py OUT [OUT...] (the rounds of every folder together)."""

from __future__ import annotations

import glob
import json
import statistics
import sys

outs = sys.argv[1:] or ["out"]
files = [f for out in outs for f in glob.glob(f"{out}/*.json")]
for model in sorted({p.split("/")[-1].rsplit("-", 2)[0] for p in files}):
    arms = {w: [json.load(open(f)) for f in sorted(files) if f.split("/")[-1].startswith(f"{model}-{w}-")]
            for w in ("old", "new")}
    keys = list(arms["old"][0])
    same = all(r[k]["logits"] == arms["old"][0][k]["logits"] for w in arms for r in arms[w] for k in keys)
    print(f"{model}: {len(arms['old'])} + {len(arms['new'])} processes, logits identical in all: {same}")
    for k in keys:
        o = statistics.median(r[k]["ms"] for r in arms["old"])
        n = statistics.median(r[k]["ms"] for r in arms["new"])
        print(f"  {k:>10}: old {o:6.2f} ms  new {n:6.2f} ms  new/old {n / o:.3f}")
