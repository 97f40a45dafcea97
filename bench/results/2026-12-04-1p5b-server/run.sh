#!/usr/bin/env bash
# The 1.5B in the editor: the typing replay (real server over stdio, 8 sibling files open, 600 characters
# typed) with n-gram drafting against the 0.5B as a draft model (whose own cache the warm-ups now prefill).
# Usage: run.sh OUT [seeds...]. Each seed runs the three pairs back to back (the default 0.5B pair too),
# rotating which goes first. The server's own prompt settings (contextWindow 768 + contextBudget 256).
set -euo pipefail
out=$1; shift
seeds=${*:-0}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
replay() {  # pair seed
  dspark-lsp bench --lsp --lsp-no-compare --model "$1" --lsp-file "$repo/dspark_lsp/lsp/worker.py" --lsp-open 8 \
    --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 --seed "$2" --json "$out/$1-s$2.json" \
    >"$out/$1-s$2.log" 2>&1
}
for s in $seeds; do
  uptime >>"$out/uptime.log"
  case $(( s % 3 )) in
    0) pairs="qwen2.5-coder-1.5b qwen2.5-coder-1.5b+0.5b default" ;;
    1) pairs="qwen2.5-coder-1.5b+0.5b default qwen2.5-coder-1.5b" ;;
    *) pairs="default qwen2.5-coder-1.5b qwen2.5-coder-1.5b+0.5b" ;;
  esac
  for p in $pairs; do replay "$p" "$s"; done
done
uptime >>"$out/uptime.log"
