#!/usr/bin/env bash
# Held-out acceptance on the 1.5B's set (run-set.sh), k = 5, the 4-bit 1.5B's features (cached):
# n-gram lookup alone, a feature draft alone and behind lookup. Usage: bash run-accept.sh OUT DRAFT_DIR TAG
set -euo pipefail
out="$1"; draft="$2"; tag="$3"
set_file="$out/heldout3-1p5b.json"
common=(--set "$set_file" --target qwen2.5-coder-1.5b --target-dtype gguf --k 5 --threads 2
        --features-cache runs/heldout3-1p5b-feats.pt)
[ -f "$out/accept-ngram.json" ] || python -m dspark_lsp.bench.acceptance "${common[@]}" --draft ngram \
  --json "$out/accept-ngram.json" > "$out/accept-ngram.log" 2>&1
python -m dspark_lsp.bench.acceptance "${common[@]}" --draft "$draft" --json "$out/accept-$tag.json" > "$out/accept-$tag.log" 2>&1
python -m dspark_lsp.bench.acceptance "${common[@]}" --draft "$draft" --hybrid --json "$out/accept-$tag-hybrid.json" > "$out/accept-$tag-hybrid.log" 2>&1
