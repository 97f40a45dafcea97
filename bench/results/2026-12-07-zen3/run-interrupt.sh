#!/usr/bin/env bash
# The 1.5B's typing replay again with prefill slices that stop between layers (engine/interrupt.py), same
# seeds and places as run.sh's replay step; then the 0.5B. Repository root, venv active.
# Usage: bash run-interrupt.sh [SUFFIX]   (SUFFIX names the run: "-int" by default)
set -euo pipefail
out=bench/results/2026-12-07-zen3
sfx=${1:--int}
replay() {  # name model seed [--lsp-mid-file]
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$2" ${4:-} \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    --seed "$3" --json $out/$1.json > $out/$1.log 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
replay mid-1p5b-s0$sfx qwen2.5-coder-1.5b 0 --lsp-mid-file
replay end-1p5b-s0$sfx qwen2.5-coder-1.5b 0
replay mid-1p5b-s1$sfx qwen2.5-coder-1.5b 1 --lsp-mid-file
replay end-1p5b-s1$sfx qwen2.5-coder-1.5b 1
