#!/usr/bin/env bash
# The 764 seeded HumanEval infilling holes of the README's quality table (300 single / 300 multi / 164 span,
# seed 0), through the service with every default, on the new default target (the 1.5B): the same command
# as the 0.5B's row (2026-12-06-token-healing/he764-defaults.json) with no --model.
# Repository root, venv active, the 1.5B prepared.   Usage: bash run-eval.sh
set -euo pipefail
out=bench/results/2026-12-07-default-1p5b
echo "before: $(uptime)" >> $out/uptime-eval.log
dspark-lsp eval --limit 300 --seed 0 --sets single,multi,span --threads 1 --llamacpp off --no-ceilings \
  --out $out/he764-1p5b-defaults.json > $out/he764-1p5b-defaults.log 2>&1
echo "after: $(uptime)" >> $out/uptime-eval.log
