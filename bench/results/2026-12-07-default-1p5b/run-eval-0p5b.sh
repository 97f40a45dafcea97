#!/usr/bin/env bash
# The 0.5B pair on the same 764 holes with the same code as the 1.5B's run (run-eval.sh): the two rows of
# the default decision from one version. Repository root, venv active, the 0.5B prepared.
set -euo pipefail
out=bench/results/2026-12-07-default-1p5b
echo "before 0.5B: $(uptime)" >> $out/uptime-eval.log
dspark-lsp eval --model qwen2.5-coder-0.5b --limit 300 --seed 0 --sets single,multi,span --threads 1 --llamacpp off \
  --no-ceilings --out $out/he764-0p5b-defaults.json > $out/he764-0p5b-defaults.log 2>&1
echo "after 0.5B: $(uptime)" >> $out/uptime-eval.log
