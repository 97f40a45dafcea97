#!/usr/bin/env bash
# The replay under libgomp's default spin (GOMP_SPINCOUNT=300000, what libgomp uses unset) and the
# package's 1000, interleaved per configuration. Usage: bash spin_ab.sh OUTDIR
set -u
out=${1:-.}; mkdir -p "$out"
common=(--lsp --lsp-no-compare --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 8
        --lsp-chars 300 --max-new-tokens 32)
for cfg in one-file context; do
  if [[ $cfg == context ]]; then opts=(--lsp-context 256 --context-window 768 --prefix-share 0.9)
  else opts=(--lsp-context 0 --context-window 256 --prefix-share 0.75); fi
  for spin in 300000 1000; do
    echo "== $cfg spin $spin $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    GOMP_SPINCOUNT=$spin dspark-lsp bench "${common[@]}" "${opts[@]}" --json "$out/$cfg-spin$spin.json" 2>&1 \
      | grep -E '"(p50_ms|p95_ms|mean_ms)"'
  done
done
echo "== done $(date +%T)"
