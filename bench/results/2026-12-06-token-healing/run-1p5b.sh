#!/usr/bin/env bash
# The 1.5B with the new default (spm + token healing): the typing replay at the file's end and mid-file, seeds 0
# and 1; then the repository set's 120 holes (same flags as ../2026-12-06-1p5b-repo/, whose psm run it compares to).
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
while ! grep -q after-done uptime.log; do sleep 20; done
pair=qwen2.5-coder-1.5b
replay() {  # where seed
  local flag=""; [[ $1 == mid ]] && flag=--lsp-mid-file
  uptime >>uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --lsp --lsp-no-compare --model "$pair" $flag \
    --lsp-file "$repo/dspark_lsp/lsp/worker.py" --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 \
    --max-new-tokens 32 --seed "$2" --lsp-fim-order spm \
    --json "replay-1p5b-$1-spm-s$2.json" >"replay-1p5b-$1-spm-s$2.log" 2>&1
}
for s in 0 1; do replay end "$s"; replay mid "$s"; done
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model "$pair" --variants +defs --limit 40 \
  --llamacpp off --threads 1 --prefix-share 0.75 --max-new-tokens 48 --fim-order spm --out repo-1p5b-spm-heal \
  >repo-1p5b-spm-heal.log 2>&1
uptime >>uptime.log
echo 1p5b-done >>uptime.log
