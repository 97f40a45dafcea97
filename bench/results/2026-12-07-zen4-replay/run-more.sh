#!/usr/bin/env bash
# More seeds for the default decision (the pooled 1.5B p50 of run.sh + run-end.sh, 248 ms, sat at the
# 250 ms bound): the 1.5B seeds 2 and 3 and the 0.5B seed 1, mid-file and at the end, as run.sh / run-end.sh.
# Repository root, venv active, both models prepared.   Usage: bash run-more.sh
set -euo pipefail
out=bench/results/2026-12-07-zen4-replay
replay() {  # name model seed [--lsp-mid-file]
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$2" ${4:-} \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    --seed "$3" --json $out/$1.json > $out/$1.log 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
replay replay-1p5b-s2 default 2 --lsp-mid-file
replay end-1p5b-s2 default 2
replay replay-0p5b-s1 qwen2.5-coder-0.5b 1 --lsp-mid-file
replay end-0p5b-s1 qwen2.5-coder-0.5b 1
replay replay-1p5b-s3 default 3 --lsp-mid-file
replay end-1p5b-s3 default 3
