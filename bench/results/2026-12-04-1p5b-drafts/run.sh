#!/usr/bin/env bash
# Issue 32: which draft for the 1.5B, by measurement. The three shipped 1.5B pairs one after the other on the
# same 11 prompts (HumanEval single/multi/span + one hole per bench/corpus language, 32 new tokens, greedy):
# n-gram lookup only, our token draft behind lookup (+dspark), the 0.5B on its 4-bit kernel behind lookup
# (+0.5b). Each run has its own target_only row, so each ratio is within one process.
# Usage: bash run.sh OUT_DIR (repository root, venv active, both models prepared; a quiet host: check `uptime`).
set -euo pipefail
out="${1:-.}"
mkdir -p "$out"
uptime | tee "$out/uptime.log"
for pair in qwen2.5-coder-1.5b qwen2.5-coder-1.5b+dspark qwen2.5-coder-1.5b+0.5b; do
  dspark-lsp bench --model "$pair" --limit 1 --sets single,multi,span --corpus bench/corpus \
    --max-new-tokens 32 --threads 2 --methods target_only,dspark --forward-cost \
    --json "$out/$pair.json" > "$out/$pair.txt" 2>&1
  uptime | tee -a "$out/uptime.log"
done
