#!/usr/bin/env bash
# Typing replay on the Zen 4 host with this session's defaults (int8 prompts, 6-bit Q6_K codes): the real
# server over stdio, 600 characters typed back into the middle of worker.py, 8 sibling files open, the
# server's defaults; the 1.5B (seeds 0 and 1) and the default 0.5B pair (seed 0), one process after the other.
# Repository root, venv active, both models prepared.   Usage: bash run.sh
set -euo pipefail
out=bench/results/2026-12-07-zen4-replay
replay() {  # name model seed
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$2" --lsp-mid-file \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    --seed "$3" --json $out/$1.json > $out/$1.log 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
replay replay-1p5b-s0 qwen2.5-coder-1.5b 0
replay replay-0p5b-s0 default 0
replay replay-1p5b-s1 qwen2.5-coder-1.5b 1
