#!/usr/bin/env bash
# Issue 32 on the Zen 4 host (AVX-512, VNNI, BF16), int8 prefill rows and 6-bit Q6_K codes (the new defaults): both targets against llama.cpp
# (llama-cpp-python 0.3.36, `pip install -e '.[llamacpp]'`, native build), then the 1.5B through the service
# on 30 HumanEval holes a set (completion latency). Repository root, venv active, both models prepared.
# Usage: bash run.sh [STEP...]   steps: bench15 bench05 eval15 (default: all, in that order)
set -euo pipefail
out=bench/results/2026-12-07-zen4-six
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(bench15 bench05 eval15)
bench() {  # name model
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --model "$2" --limit 1 --sets single,multi,span --corpus bench/corpus \
    --max-new-tokens 32 --threads 2 --methods target_only,llamacpp_greedy,llamacpp_lookup,dspark --forward-cost \
    --json $out/$1.json > $out/$1.txt 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
for s in "${steps[@]}"; do
  case $s in
    bench15) bench bench-1p5b qwen2.5-coder-1.5b ;;
    bench05) bench bench-0p5b default ;;
    eval15)
      echo "before eval15: $(uptime)" >> $out/uptime.log
      flock /tmp/dspark-cpu.lock dspark-lsp eval --model qwen2.5-coder-1.5b --limit 30 --seed 0 --sets single,multi,span \
        --threads 2 --llamacpp off --no-ceilings --out $out/eval-1p5b.json > $out/eval-1p5b.txt 2>&1
      echo "after eval15: $(uptime)" >> $out/uptime.log ;;
  esac
done
