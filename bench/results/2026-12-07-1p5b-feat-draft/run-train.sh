#!/usr/bin/env bash
# Fine-tune the transferred 1.5B draft online: every batch is 4 fresh corpus samples through the 4-bit 1.5B
# (training.online), only fc, the output map and the input norms trained (--freeze-layer), unrolled 3 passes; checkpoints every 5 minutes (resumable: the
# same command continues from runs/dspark-feat-qwc15/checkpoint.pt). fp32 (--no-bf16): this host (AMD EPYC, AVX2
# only) has no native bf16, where autocast is slower than fp32.
set -euo pipefail
out="${1:-bench/results/2026-12-07-1p5b-feat-draft}"
steps="${2:-400}"
minutes="${3:-60}"
python -m dspark_lsp.training.feat_train --name dspark-feat-qwc15 --runs-dir runs --target qwen2.5-coder-1.5b \
  --online --target-dtype gguf --init-from runs/dspark-feat-qwc15-init \
  --corpus-file runs/dspark-draft-qwc05/corpus.json --vocab-from dspark_lsp/drafts/dspark-feat-qwc05 \
  --features runs/no-features --lr 3e-4 --warmup-steps 3 --reg-weight 0.1 --freeze-layer --max-steps "$steps" --max-minutes "$minutes" \
  --checkpoint-minutes 5 --batch-size 4 --unroll 3 --threads 2 --extra-share 0.3 --log-every 2 --seed 15 --no-bf16 \
  >> "$out/train.log" 2>&1
cp runs/dspark-feat-qwc15/log.jsonl "$out/train-log.jsonl"
