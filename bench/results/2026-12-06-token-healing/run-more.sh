#!/usr/bin/env bash
# After run-tail.sh: HumanEval through the service with the new default (spm + healing): the 1.5B and the 0.5B on
# the 90 holes of ../2026-12-06-act8-eval/ (30 a set, seed 0, 2 threads, cold), psm beside each in the same run;
# then the README's 764 holes (--limit 300, seed 0) with the default pair.
set -u
cd "$(dirname "$0")"
while ! grep -q tail-done uptime.log; do sleep 20; done
he90() {  # model order
  uptime | sed "s/^/$1 $2 /" >>uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp eval --model "$1" --limit 30 --seed 0 --sets single,multi,span --threads 2 \
    --llamacpp off --no-ceilings --fim-order "$2" --out "he90-$1-$2.json" >"he90-$1-$2.log" 2>&1
}
he90 qwen2.5-coder-1.5b spm; he90 qwen2.5-coder-1.5b psm; he90 default spm; he90 default psm
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --limit 300 --seed 0 --sets single,multi,span --threads 1 --llamacpp off \
  --no-ceilings --out he764-defaults.json >he764-defaults.log 2>&1
uptime >>uptime.log
echo more-done >>uptime.log
