#!/usr/bin/env bash
# Cold prefill before/after the bf16 prefill expansion, processes alternated: BASE is a checkout of the commit
# before (put first on PYTHONPATH). Each process times a 256- and a 1,024-token prefill of worker.py twice.
# Usage: run.sh OUT BASE [rounds]
set -euo pipefail
out=$1 base=$2 rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for model in qwen2.5-coder-1.5b default; do
    for side in before after; do
      path=$repo; [[ $side == before ]] && path=$base
      uptime >>"$out/uptime.log"
      PYTHONPATH=$path python "$here/prefill.py" "$model" 2>/dev/null | sed "s/^/$side r$r /" >>"$out/prefill.txt"
    done
  done
done
