#!/usr/bin/env bash
# The typing replay (real server over stdio, dspark_lsp/lsp/worker.py typed, 600 characters, 8 sibling files
# open, 32 new tokens, the server's own prompt settings) before and after the recent-outputs lookup, one
# pair, alternating which code runs first per seed. BASE: a checkout of the commit before (its dspark_lsp is
# put first on PYTHONPATH, which the server subprocess inherits). Usage: run.sh OUT BASE PAIR [seeds...]
set -euo pipefail
out=$1 base=$2 pair=$3; shift 3
seeds=${*:-0}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
replay() {  # label pythonpath seed
  uptime >>"$out/uptime.log"
  PYTHONPATH=$2 dspark-lsp bench --lsp --lsp-no-compare --model "$pair" --lsp-file "$repo/dspark_lsp/lsp/worker.py" \
    --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 --seed "$3" \
    --json "$out/$pair-$1-s$3.json" >"$out/$pair-$1-s$3.log" 2>&1
}
for s in $seeds; do
  if (( s % 2 == 0 )); then replay before "$base" "$s"; replay after "$repo" "$s"
  else replay after "$repo" "$s"; replay before "$base" "$s"; fi
done
uptime >>"$out/uptime.log"
