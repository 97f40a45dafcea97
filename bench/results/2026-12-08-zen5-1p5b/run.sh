#!/usr/bin/env bash
# Issue 32 on a Zen 5 host (2-core AMD EPYC, family 26 model 2: AVX-512, VNNI, BF16): the 1.5B against
# llama.cpp (llama-cpp-python 0.3.36, native build) with libgomp's own spin (the package's default from
# e693cdd) and with GOMP_SPINCOUNT=1000 (the package's setting before), alternated; the 0.5B once; then the
# 1.5B through the service on 30 HumanEval holes a set. Repository root, venv active, both models prepared.
# Usage: bash run.sh [STEP...]   steps: bench15 bench05 eval15 (default: all)
set -euo pipefail
out=bench/results/2026-12-08-zen5-1p5b
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(bench15 bench05 eval15)
bench() {  # name model [env...]
  local name=$1 model=$2; shift 2
  echo "before $name: $(uptime)" >> $out/uptime.log
  env "$@" dspark-lsp bench --model "$model" --limit 1 --sets single,multi,span --corpus bench/corpus \
    --max-new-tokens 32 --threads 2 --methods target_only,llamacpp_greedy,llamacpp_lookup,dspark --forward-cost \
    --json $out/$name.json > $out/$name.txt 2>&1
  echo "after $name: $(uptime)" >> $out/uptime.log
}
for s in "${steps[@]}"; do
  case $s in
    bench15) for r in 1 2; do
               bench bench-1p5b-r$r qwen2.5-coder-1.5b DSPARK_X=1
               bench bench-1p5b-spin1000-r$r qwen2.5-coder-1.5b GOMP_SPINCOUNT=1000
             done ;;
    bench05) bench bench-0p5b qwen2.5-coder-0.5b DSPARK_X=1 ;;
    eval15)
      echo "before eval15: $(uptime)" >> $out/uptime.log
      dspark-lsp eval --model qwen2.5-coder-1.5b --limit 30 --seed 0 --sets single,multi,span \
        --threads 2 --llamacpp off --no-ceilings --out $out/eval-1p5b.json > $out/eval-1p5b.txt 2>&1
      echo "after eval15: $(uptime)" >> $out/uptime.log ;;
  esac
done
