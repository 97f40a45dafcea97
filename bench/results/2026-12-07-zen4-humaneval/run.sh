#!/usr/bin/env bash
# The 1.5B through the service on 30 HumanEval-infilling holes a set (cold: every hole a new document),
# the server's defaults. Repository root, venv active.
set -euo pipefail
out=bench/results/2026-12-07-zen4-humaneval
echo "before: $(uptime)" >> $out/uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --model qwen2.5-coder-1.5b --limit 30 --seed 0 --sets single,multi,span \
  --threads 2 --llamacpp off --no-ceilings --out $out/eval-1p5b.json > $out/eval-1p5b.txt 2>&1
echo "after: $(uptime)" >> $out/uptime.log
