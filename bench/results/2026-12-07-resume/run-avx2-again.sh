#!/usr/bin/env bash
# A second pass of run-avx2.sh's end-of-file seed 0 (the first pass's "res" run met an unfinished
# open-file warm-up at its first request), in the other order: res, then int.
set -euo pipefail
out=$(pwd)/bench/results/2026-12-07-resume
export DSPARK_KERNEL_MARCH=x86-64-v3
replay() {  # variant
  local name=avx2-end-1p5b-s0-$1-b
  echo "before $name: $(uptime)" >> $out/uptime.log
  (cd /tmp/wt-$1 && PYTHONPATH=/tmp/wt-$1 flock /tmp/dspark-cpu.lock python -m dspark_lsp bench --lsp --lsp-no-compare \
    --model qwen2.5-coder-1.5b --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 \
    --lsp-chars 600 --max-new-tokens 32 --seed 0 --json $out/$name.json > $out/$name.log 2>&1)
  echo "after $name: $(uptime)" >> $out/uptime.log
}
replay res; replay int
