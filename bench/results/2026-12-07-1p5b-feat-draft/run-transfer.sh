#!/usr/bin/env bash
# Issue 32: a feature draft for the 1.5B started from the 0.5B's (training/transfer.py): ridge maps fitted on
# 8k positions of both 4-bit targets' features. Then run-set.sh (the held-out set) and run-train.sh.
# Usage: bash run-transfer.sh OUT (repository root, venv active, both models prepared).
set -euo pipefail
out="${1:-bench/results/2026-12-07-1p5b-feat-draft}"
mkdir -p "$out" runs
uptime | tee -a "$out/uptime.log"
python -m dspark_lsp.training.transfer --tokens 8000 --dtype gguf --out runs/dspark-feat-qwc15-init > "$out/transfer.json" 2> "$out/transfer.log"
uptime | tee -a "$out/uptime.log"
