#!/usr/bin/env bash
# The typing replay with 8 files open, three context configurations back to back, each request's row kept
# (per_request in the JSON): the defaults (definitions for Python/Go, no open-file chunks, what the
# context leaves widening the window), both sources (the defaults before 2026-12-04), one file's 256 tokens.
# Usage: bash run.sh OUT_DIR   (from the repository root, venv active; check `uptime` first: a quiet host)
set -euo pipefail
out="${1:-.}"
mkdir -p "$out"
common=(--lsp --lsp-no-compare --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 8
        --lsp-chars 600 --max-new-tokens 32)
uptime | tee "$out/uptime.log"
dspark-lsp bench "${common[@]}" --lsp-context 256 --context-window 768 --prefix-share 0.9 \
  --json "$out/defaults.json" > /dev/null
dspark-lsp bench "${common[@]}" --lsp-context 256 --context-window 768 --prefix-share 0.9 --lsp-sources open,defs \
  --json "$out/both.json" > /dev/null
dspark-lsp bench "${common[@]}" --lsp-context 0 --context-window 256 --prefix-share 0.75 \
  --json "$out/one-file.json" > /dev/null
uptime | tee -a "$out/uptime.log"
