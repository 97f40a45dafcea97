#!/usr/bin/env bash
# Issue 32 on an AVX2-only laptop-class CPU (this session's host: AMD EPYC family 25 model 1, Zen 3, 2 cores,
# no AVX-512): both targets against llama.cpp (llama-cpp-python 0.3.36 built with AVX2 flags, see README),
# then the typing replay (the real server over stdio) for both targets, mid-file and at the file's end.
# Repository root, venv active, both models prepared.
# Usage: bash run.sh [STEP...]   steps: bench15 bench05 replay (default: all, in that order)
set -euo pipefail
out=bench/results/2026-12-07-zen3
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(bench15 bench05 replay)
bench() {  # name model
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --model "$2" --limit 1 --sets single,multi,span --corpus bench/corpus \
    --max-new-tokens 32 --threads 2 --methods target_only,llamacpp_greedy,llamacpp_lookup,dspark --forward-cost \
    --json $out/$1.json > $out/$1.txt 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
replay() {  # name model seed [--lsp-mid-file]
  echo "before $1: $(uptime)" >> $out/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$2" ${4:-} \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    --seed "$3" --json $out/$1.json > $out/$1.log 2>&1
  echo "after $1: $(uptime)" >> $out/uptime.log
}
for s in "${steps[@]}"; do
  case $s in
    bench15) bench bench-1p5b qwen2.5-coder-1.5b ;;
    bench05) bench bench-0p5b qwen2.5-coder-0.5b ;;
    replay)
      replay mid-1p5b-s0 qwen2.5-coder-1.5b 0 --lsp-mid-file
      replay mid-0p5b-s0 qwen2.5-coder-0.5b 0 --lsp-mid-file
      replay end-1p5b-s0 qwen2.5-coder-1.5b 0
      replay end-0p5b-s0 qwen2.5-coder-0.5b 0 ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
