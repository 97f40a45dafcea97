#!/usr/bin/env bash
# int8 prefill rows (issue 32, "Prefill"): the 1.5B through the service on 30 HumanEval holes a set, the new
# default (int8 prefill rows on a CPU without AMX) against the bf16 GEMM prefill (DSPARK_PREFILL=bf16), one
# process after the other; then the prefill alone, in one process (prefill_ab.py, paths alternated).
# Repository root, venv active, both models prepared.   Usage: bash run.sh [STEP...]  steps: eval ab
set -euo pipefail
out=bench/results/2026-12-07-int8-prefill
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(eval ab)
for s in "${steps[@]}"; do
  case $s in
    eval)
      for p in int8 bf16; do
        echo "before eval-$p: $(uptime)" >> $out/uptime.log
        DSPARK_PREFILL=$p flock /tmp/dspark-cpu.lock dspark-lsp eval --model qwen2.5-coder-1.5b --limit 30 --seed 0 \
          --sets single,multi,span --threads 2 --llamacpp off --no-ceilings --out $out/eval-1p5b-$p.json \
          > $out/eval-1p5b-$p.txt 2>&1
        echo "after eval-$p: $(uptime)" >> $out/uptime.log
      done ;;
    ab)
      for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do
        echo "before ab-$m: $(uptime)" >> $out/uptime.log
        flock /tmp/dspark-cpu.lock python $out/prefill_ab.py --model $m --tokens 256 --rounds 6 > $out/ab-$m.txt 2>&1
        DSPARK_KERNEL_MARCH=x86-64-v3 DSPARK_PREFILL=fp32 flock /tmp/dspark-cpu.lock python $out/prefill_ab.py \
          --model $m --tokens 256 --rounds 6 > $out/ab-$m-avx2.txt 2>&1
        echo "after ab-$m: $(uptime)" >> $out/uptime.log
      done ;;
  esac
done
