#!/usr/bin/env bash
# The 1.5B's held-out acceptance set: the 56 prompts of the 0.5B draft's heldout3 set (16 Python, 16
# JavaScript, 12 C++ headers, 12 TypeScript; held-out files), the 4-bit 1.5B's greedy continuations (32).
set -euo pipefail
out="${1:-bench/results/2026-12-07-1p5b-feat-draft}"
python -m dspark_lsp.bench.acceptance --make-set --set "$out/heldout3-1p5b.json" --target qwen2.5-coder-1.5b \
  --prompts-from dspark_lsp/drafts/dspark-feat-qwc05/eval/heldout3_gguf.json --target-dtype gguf --threads 2 \
  --max-new-tokens 32 > "$out/make-set.log" 2>&1
