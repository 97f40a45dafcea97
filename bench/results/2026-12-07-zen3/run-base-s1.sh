#!/usr/bin/env bash
# Baselines for run-interrupt.sh's seed 1 (the code before engine/interrupt.py): the 1.5B mid-file and at
# the file's end, as run.sh's replay step. Repository root, venv active.
set -euo pipefail
out=bench/results/2026-12-07-zen3
replay() {  # name model seed [--lsp-mid-file]
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$2" ${4:-} \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    --seed "$3" --json $out/$1.json > $out/$1.log 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
replay mid-1p5b-s1 qwen2.5-coder-1.5b 1 --lsp-mid-file
replay end-1p5b-s1 qwen2.5-coder-1.5b 1
