#!/usr/bin/env bash
# FIM arrangement while editing mid-file: the typing replay (real server over stdio, worker.py, 600 characters
# typed back into the middle of the file, 8 sibling files open, 32 new tokens, the server's defaults) with
# fimOrder psm and spm, order alternated per seed; then HumanEval pass@1 with each order.
# Usage: run.sh OUT PAIR "SEEDS" LIMIT
set -euo pipefail
out=$1 pair=$2 seeds=$3 limit=$4
repo=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
replay() {  # order seed
  uptime >>"$out/uptime.log"
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$pair" --lsp-mid-file \
    --lsp-file "$repo/dspark_lsp/lsp/worker.py" --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 \
    --max-new-tokens 32 --seed "$2" --lsp-fim-order "$1" \
    --json "$out/replay-$pair-$1-s$2.json" >"$out/replay-$pair-$1-s$2.log" 2>&1
}
for s in $seeds; do
  order="psm spm"; (( s % 2 == 1 )) && order="spm psm"
  for o in $order; do replay "$o" "$s"; done
done
if (( limit > 0 )); then
  for o in psm spm; do
    uptime >>"$out/uptime.log"
    flock /tmp/dspark-cpu.lock dspark-lsp eval --model "$pair" --limit "$limit" --seed 0 --sets single,multi,span \
      --threads 1 --llamacpp off --no-ceilings --fim-order "$o" --out "$out/eval-$pair-$o.json" \
      >"$out/eval-$pair-$o.log" 2>&1
  done
fi
uptime >>"$out/uptime.log"
