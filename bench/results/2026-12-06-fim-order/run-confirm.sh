#!/usr/bin/env bash
# After prompt.py's spm became the FIM paper's form (<prefix><suffix>s<middle>p): HumanEval with another seed,
# the repository-level set's 120 holes, and the mid-file typing replay, psm against spm.
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
ev() {  # order seed
  uptime >>uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp eval --model default --limit 50 --seed "$2" --sets single,multi,span \
    --threads 1 --llamacpp off --no-ceilings --fim-order "$1" --out "eval-default-$1-seed$2.json" >"eval-default-$1-seed$2.log" 2>&1
}
ev spm 0; ev spm 1; ev psm 1
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants +defs --limit 40 \
  --llamacpp off --threads 1 --prefix-share 0.75 --max-new-tokens 48 --fim-order spm --out repo-spm >repo-spm.log 2>&1
bash run.sh . default "0 1" 0 >>run.log 2>&1
echo confirm-done >>run.log
