#!/usr/bin/env bash
# The same replays with the kernel built for AVX2 alone (DSPARK_KERNEL_MARCH=x86-64-v3: no VNNI, int8
# products by vpmaddubsw, prefill rows in blocks of 64), which prefills the 1.5B at ~13 ms a token on this
# Zen 4 instead of ~7.5: a stand-in for a slower laptop CPU, where a keystroke stops a warm-up's slice
# half-way. Variants /tmp/wt-int and /tmp/wt-res as in run.sh. Repository root, venv active.
set -euo pipefail
out=$(pwd)/bench/results/2026-12-07-resume
export DSPARK_KERNEL_MARCH=x86-64-v3
replay() {  # variant place seed
  local name=avx2-$2-1p5b-s$3-$1 extra=""
  [ "$2" = mid ] && extra=--lsp-mid-file
  echo "before $name: $(uptime)" >> $out/uptime.log
  (cd /tmp/wt-$1 && PYTHONPATH=/tmp/wt-$1 flock /tmp/dspark-cpu.lock python -m dspark_lsp bench --lsp --lsp-no-compare \
    --model qwen2.5-coder-1.5b $extra --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 \
    --lsp-chars 600 --max-new-tokens 32 --seed "$3" --json $out/$name.json > $out/$name.log 2>&1)
  echo "after $name: $(uptime)" >> $out/uptime.log
}
replay int end 0; replay res end 0
replay res end 1; replay int end 1
replay int mid 0; replay res mid 0
