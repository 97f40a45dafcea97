#!/usr/bin/env bash
# A kernel A/B: OLD and NEW are two checkouts (here: before / after the register-resident attention); each
# round runs one process of each, alternating which goes first.
# Usage: run.sh OLD NEW OUT [model] [rounds] [contexts] [rows]   (the last two: ab.py's comma lists)
set -euo pipefail
old=$1 new=$2 out=$3 model=${4:-qwen2.5-coder-0.5b} rounds=${5:-3} contexts=${6:-256,1024} rows=${7:-1,4}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
uptime >>"$out/uptime.log"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then order="old new"; else order="new old"; fi
  for which in $order; do
    tree=$old; [[ $which == new ]] && tree=$new
    (cd "$tree" && PYTHONPATH="$tree" python "$here/ab.py" "$model" "$out/$model-$which-$r.json" "$contexts" "$rows")
  done
done
uptime >>"$out/uptime.log"
