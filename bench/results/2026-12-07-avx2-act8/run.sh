#!/bin/bash
# int8 activations on an AVX2 build (no VNNI) against int16, both targets; then the VNNI build for scale.
# Run from the repository root with the venv active: bash bench/results/2026-12-07-avx2-act8/run.sh
set -e
out=bench/results/2026-12-07-avx2-act8
for model in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do
  for march in x86-64-v3 native; do
    log=$out/ab-$model-$march.log
    echo "uptime before: $(uptime)" > $log
    DSPARK_KERNEL_MARCH=$march python -m dspark_lsp.quant.act8_ab --model $model --sizes 1,2,4,8 --context 512 --rounds 30 >> $log 2>&1
    echo "uptime after: $(uptime)" >> $log
  done
done
