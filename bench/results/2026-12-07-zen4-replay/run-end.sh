#!/usr/bin/env bash
# As run.sh, at the end of the file instead of its middle (no --lsp-mid-file: no suffix to reuse, the case
# where the AMX host's 1.5B follow-ups were 233-278 ms): the default (the 1.5B) seeds 0 and 1, the 0.5B seed 0.
# Repository root, venv active, both models prepared.   Usage: bash run-end.sh
set -euo pipefail
out=bench/results/2026-12-07-zen4-replay
replay() {  # name model seed
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$2" \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    --seed "$3" --json $out/$1.json > $out/$1.log 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
replay end-1p5b-s0 default 0
replay end-0p5b-s0 qwen2.5-coder-0.5b 0
replay end-1p5b-s1 default 1
