#!/usr/bin/env bash
# Token healing for suffix-first prompts: the repository set's 120 holes (cut after an imported name's `(` or
# `.`) with psm and with spm + healing, same flags as ../2026-12-06-fim-order/repo-spm; then HumanEval pass@1,
# spm + healing, seeds 0 and 1 (psm and unhealed spm on the same holes: ../2026-12-06-fim-order/).
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
repo_eval() {  # order out
  uptime >>uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants +defs --limit 40 \
    --llamacpp off --threads 1 --prefix-share 0.75 --max-new-tokens 48 --fim-order "$1" --out "$2" >"$2.log" 2>&1
}
he() {  # seed
  uptime >>uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp eval --model default --limit 50 --seed "$1" --sets single,multi,span \
    --threads 1 --llamacpp off --no-ceilings --fim-order spm --out "eval-default-spm-heal-seed$1.json" \
    >"eval-default-spm-heal-seed$1.log" 2>&1
}
repo_eval spm repo-spm-heal
repo_eval psm repo-psm
he 0; he 1
uptime >>uptime.log
echo quality-done >>uptime.log
