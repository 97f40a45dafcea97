#!/usr/bin/env bash
# spin_ab.sh's one-file replay with one core of other work (../2026-12-03-omp-spin/burn.py) running.
set -u
out=${1:-.}; mkdir -p "$out"
here=$(dirname "$0")
python "$here/../2026-12-03-omp-spin/burn.py" 600 & bp=$!
for spin in 300000 1000; do
  echo "== one-file loaded spin $spin $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  GOMP_SPINCOUNT=$spin dspark-lsp bench --lsp --lsp-no-compare --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 \
    --lsp-first-after 8 --lsp-chars 300 --max-new-tokens 32 --lsp-context 0 --context-window 256 \
    --prefix-share 0.75 --json "$out/one-file-loaded-spin$spin.json" 2>&1 | grep -E '"(p50_ms|p95_ms|mean_ms)"'
done
kill $bp
echo "== done $(date +%T)"
