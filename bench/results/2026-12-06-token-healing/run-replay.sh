#!/usr/bin/env bash
# The typing replay (real server over stdio, dspark_lsp/lsp/worker.py, 600 characters typed, 8 sibling files
# open, 32 new tokens, the server's defaults otherwise) with fimOrder psm and spm (token healing on), typed back
# into the middle of the file (--lsp-mid-file) and at its end; the order alternates per seed.
# Usage: run-replay.sh PAIR "SEEDS"
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
pair=$1 seeds=$2
replay() {  # where order seed
  local flag=""; [[ $1 == mid ]] && flag=--lsp-mid-file
  uptime >>uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$pair" $flag \
    --lsp-file "$repo/dspark_lsp/lsp/worker.py" --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 \
    --max-new-tokens 32 --seed "$3" --lsp-fim-order "$2" \
    --json "replay-$pair-$1-$2-s$3.json" >"replay-$pair-$1-$2-s$3.log" 2>&1
}
for s in $seeds; do
  order="psm spm"; (( s % 2 == 1 )) && order="spm psm"
  for where in mid end; do
    for o in $order; do replay "$where" "$o" "$s"; done
  done
done
uptime >>uptime.log
echo "replay-$pair-done" >>uptime.log
