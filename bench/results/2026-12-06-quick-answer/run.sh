#!/usr/bin/env bash
# The typing replay (real server over stdio, dspark_lsp/lsp/worker.py typed, 600 characters, 8 sibling files
# open, 32 new tokens, the server's own prompt settings) with quickAnswerMs at each value given, alternating
# the order per seed. Usage: run.sh OUT PAIR "MS MS ..." [seeds...]
set -euo pipefail
out=$1 pair=$2 values=$3; shift 3
seeds=${*:-0}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
replay() {  # ms seed
  uptime >>"$out/uptime.log"
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$pair" \
    --lsp-file "$repo/dspark_lsp/lsp/worker.py" --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 \
    --max-new-tokens 32 --seed "$2" --lsp-quick-ms "$1" \
    --json "$out/$pair-q$1-s$2.json" >"$out/$pair-q$1-s$2.log" 2>&1
}
for s in $seeds; do
  order=$values
  if (( s % 2 == 1 )); then order=$(echo "$values" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for ms in $order; do replay "$ms" "$s"; done
done
uptime >>"$out/uptime.log"
