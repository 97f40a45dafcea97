#!/usr/bin/env bash
# The typing replay through the real server over stdio, 8 sibling files open (the typed file's folder is
# the workspace), the first completion asked 8 s after the open; the new defaults (context on) and the
# previous ones (256 tokens of one file), back to back. Usage: bash run.sh OUTDIR
set -u
out=${1:-.}
common=(--lsp --lsp-no-compare --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 8
        --lsp-chars 300 --max-new-tokens 32)
echo "== context $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
dspark-lsp bench "${common[@]}" --lsp-context 256 --context-window 768 --prefix-share 0.9 --json "$out/context.json" 2>&1 | tail -25
echo "== one-file $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
dspark-lsp bench "${common[@]}" --lsp-context 0 --context-window 256 --prefix-share 0.75 --json "$out/one-file.json" 2>&1 | tail -25
echo "== done $(date +%T)"
