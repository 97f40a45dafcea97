#!/usr/bin/env bash
# HumanEval infilling through the service (30 holes a set, seed 0, cold, the server's prompt settings) with
# the kernel's int16 and int8 activations, both targets. Usage: bash run.sh OUT (repository root, venv active).
set -euo pipefail
out="${1:-.}"
mkdir -p "$out"
for model in default qwen2.5-coder-1.5b; do
  for act8 in 0 1; do
    uptime | sed "s/^/$model act8=$act8 /" >>"$out/uptime.log"
    DSPARK_ACT8=$act8 dspark-lsp eval --model "$model" --limit 30 --seed 0 --sets single,multi,span --threads 2 \
      --llamacpp off --no-ceilings --out "$out/$model-act8-$act8.json" >"$out/$model-act8-$act8.log" 2>&1
  done
done
uptime >>"$out/uptime.log"
