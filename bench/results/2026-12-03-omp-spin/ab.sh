#!/usr/bin/env bash
# A/B of libgomp's spin-wait, interleaved, same prompts: ARMS are "default" (GOMP_SPINCOUNT unset, libgomp's
# 300,000) or a number for GOMP_SPINCOUNT. Usage: bash ab.sh OUTDIR MODEL ROUNDS "ARM ARM ..."
set -u
out=$1; model=$2; rounds=${3:-2}; arms=${4:-"default 1000"}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for arm in $arms; do
    echo "== round $r arm $arm $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ $arm == default ]]; then envs=(env -u GOMP_SPINCOUNT); else envs=(env GOMP_SPINCOUNT=$arm); fi
    "${envs[@]}" dspark-lsp bench --model "$model" --limit 1 --sets single,multi,span \
      --max-new-tokens 32 --threads 2 --methods target_only,dspark --forward-cost \
      --json "$out/$model-$arm-r$r.json" 2>&1 | grep -vE "^\s*$" | tail -12
  done
done
