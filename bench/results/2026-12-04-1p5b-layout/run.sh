#!/usr/bin/env bash
# Issue 32: the 1.5B against llama.cpp on the same GGUF, one run, after the compact K-quant scales; then the
# layouts A/B in one process. Usage: bash run.sh OUT_DIR (repository root, venv active, llama-cpp-python 0.3.36
# installed; a quiet host: check `uptime`).
set -euo pipefail
out="${1:-.}"
mkdir -p "$out"
uptime | tee "$out/uptime.log"
dspark-lsp bench --model qwen2.5-coder-1.5b --limit 1 --sets single,multi,span --corpus bench/corpus \
  --max-new-tokens 32 --threads 2 --methods target_only,llamacpp_greedy,llamacpp_lookup,dspark \
  --forward-cost --json "$out/qwen15b.json" > "$out/qwen15b.txt"
uptime | tee -a "$out/uptime.log"
python -m dspark_lsp.quant.layout_ab --model qwen2.5-coder-1.5b --sizes 1,4 --rounds 40 > "$out/layout_ab_15b.txt" 2>&1
uptime | tee -a "$out/uptime.log"
