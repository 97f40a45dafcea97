#!/usr/bin/env bash
# The chains A/B: OLD and NEW are two checkouts (before / after one chain a row for Q6_K); each
# round runs one process of each, alternating which goes first. Usage: run.sh OLD NEW OUT [model] [rounds]
set -euo pipefail
old=$1 new=$2 out=$3 model=${4:-qwen2.5-coder-0.5b} rounds=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
uptime >>"$out/uptime.log"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for which in $order; do
    tree=$old; [[ $which == new ]] && tree=$new
    (cd "$tree" && PYTHONPATH="$tree" python "$here/ab.py" "$model" "$out/$model-$which-$r.json")
  done
done
uptime >>"$out/uptime.log"
