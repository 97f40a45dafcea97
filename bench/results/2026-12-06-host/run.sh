#!/usr/bin/env bash
# This host's figures for both targets, one process per step: the bench against llama.cpp (same GGUF, 11
# prompts, 32 new tokens, 2 threads) and the typing replay on the 1.5B (HumanEval through the service:
# ../2026-12-06-act8-eval/). Usage: bash run.sh OUT (repository root, venv active, llama-cpp-python built).
set -euo pipefail
out="${1:-.}"
repo=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
common=(--limit 1 --sets single,multi,span --corpus bench/corpus --max-new-tokens 32 --threads 2)
methods=${METHODS:-target_only,llamacpp_greedy,llamacpp_lookup,dspark}
step() { uptime | sed "s/^/$1 /" >>"$out/uptime.log"; }
step 1p5b-bench
dspark-lsp bench --model qwen2.5-coder-1.5b "${common[@]}" --methods $methods --forward-cost \
  --json "$out/1p5b.json" >"$out/1p5b.txt" 2>"$out/1p5b.log"
step 0p5b-bench
dspark-lsp bench "${common[@]}" --methods $methods --forward-cost --json "$out/0p5b.json" >"$out/0p5b.txt" 2>"$out/0p5b.log"
step 1p5b-replay
dspark-lsp bench --lsp --lsp-no-compare --model qwen2.5-coder-1.5b --lsp-file "$repo/dspark_lsp/lsp/worker.py" \
  --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 --seed 0 --json "$out/1p5b-replay.json" \
  >"$out/1p5b-replay.log" 2>&1
step end
