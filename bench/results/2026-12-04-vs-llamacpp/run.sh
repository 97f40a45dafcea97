#!/usr/bin/env bash
# Both targets against llama.cpp (llama-cpp-python 0.3.36, same GGUF) on this host, one bench process per
# pair: the 1.5B with n-gram drafting, the 1.5B with the 0.5B as its draft model, and the default 0.5B pair.
# Usage: bash run.sh OUT_DIR (repository root, venv active; a quiet host: check `uptime`).
set -euo pipefail
out="${1:-.}"
mkdir -p "$out"
common=(--limit 1 --sets single,multi,span --corpus bench/corpus --max-new-tokens 32 --threads 2)
uptime | tee "$out/uptime.log"
dspark-lsp bench --model qwen2.5-coder-1.5b "${common[@]}" \
  --methods target_only,llamacpp_greedy,llamacpp_lookup,dspark --forward-cost --json "$out/1p5b.json" > "$out/1p5b.txt"
uptime | tee -a "$out/uptime.log"
dspark-lsp bench --model qwen2.5-coder-1.5b+0.5b "${common[@]}" \
  --methods target_only,llamacpp_greedy,dspark --json "$out/1p5b+0p5b.json" > "$out/1p5b+0p5b.txt"
uptime | tee -a "$out/uptime.log"
dspark-lsp bench "${common[@]}" --methods target_only,llamacpp_greedy,llamacpp_lookup,dspark --forward-cost \
  --json "$out/0p5b.json" > "$out/0p5b.txt"
uptime | tee -a "$out/uptime.log"
