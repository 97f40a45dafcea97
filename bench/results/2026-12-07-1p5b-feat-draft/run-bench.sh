#!/usr/bin/env bash
# The 1.5B with its feature draft behind n-gram lookup (pair qwen2.5-coder-1.5b+feat, `dspark`) against the
# same lookup without the draft model (`dspark_lookup_only`: what the shipped qwen2.5-coder-1.5b pair runs),
# target_only and llama.cpp greedy, one process, interleaved prompt by prompt: 11 prompts (3 HumanEval holes,
# one per bench/corpus language), 32 new tokens, greedy, 2 threads.
# Usage: bash run-bench.sh OUT [TAG] (repository root, venv active, both models prepared; a quiet host).
set -euo pipefail
out="${1:-bench/results/2026-12-07-1p5b-feat-draft}"
tag="${2:-1}"
uptime | tee -a "$out/uptime.log"
flock /tmp/dspark-cpu.lock dspark-lsp bench --model qwen2.5-coder-1.5b+feat --limit 1 --sets single,multi,span \
  --corpus bench/corpus --max-new-tokens 32 --threads 2 \
  --methods target_only,llamacpp_greedy,dspark_lookup_only,dspark --json "$out/bench-$tag.json" > "$out/bench-$tag.txt" 2>&1
uptime | tee -a "$out/uptime.log"
