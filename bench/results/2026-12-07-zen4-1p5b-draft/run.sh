#!/usr/bin/env bash
# The 1.5B's carried-over feature draft (the 0.5B's layer with ridge maps onto the 1.5B's features,
# training/transfer.py; then feat_train --freeze-layer on the 1.5B, train.log) on the Zen 4 host, whose
# verify curve is flatter than the AVX2 host's where it was first measured (../2026-12-07-1p5b-feat-draft/).
# One bench process per draft: its own target_only and lookup-only rows, the 11 prompts interleaved.
# Repository root, venv active, the 1.5B prepared, the draft built under runs/ (commands in README.md).
# Usage: bash run.sh DRAFT_DIR TAG
set -euo pipefail
out=bench/results/2026-12-07-zen4-1p5b-draft
echo "before $2: $(uptime)" >> $out/uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp bench --model qwen2.5-coder-1.5b --draft "$1" --limit 1 --sets single,multi,span \
  --corpus bench/corpus --max-new-tokens 32 --threads 2 --methods target_only,dspark_lookup_only,dspark \
  --json "$out/bench-$2.json" > "$out/bench-$2.txt" 2>&1
echo "after $2: $(uptime)" >> $out/uptime.log
