#!/usr/bin/env bash
# The 1.5B through the service and llama.cpp's infill on the same 30 HumanEval holes a set (cold: every
# hole a new document), with the service's prefill / decode breakdown. Repository root, venv active.
set -euo pipefail
out=bench/results/2026-12-07-cold-breakdown
echo "before: $(uptime)" >> $out/uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --model qwen2.5-coder-1.5b --limit 30 --seed 0 --sets single,multi,span \
  --threads 2 --llamacpp on --no-ceilings --out $out/eval-1p5b.json > $out/eval-1p5b.txt 2>&1
echo "after: $(uptime)" >> $out/uptime.log
# Where a cold hole's time goes: the first 10 holes of single and multi, prefix cache cleared before each.
echo "breakdown before: $(uptime)" >> $out/uptime.log
flock /tmp/dspark-cpu.lock python $out/breakdown.py 10 > $out/breakdown.txt
echo "breakdown after: $(uptime)" >> $out/uptime.log
