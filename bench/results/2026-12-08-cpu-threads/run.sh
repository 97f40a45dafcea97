#!/usr/bin/env bash
# The typing replay through the real server (the 1.5B, the default; 600 characters typed at the end of
# dspark_lsp/lsp/worker.py, 8 sibling files open) on an idle host and with one core busy (burn.py), each
# with the old set-up (GOMP_SPINCOUNT=1000, threads fixed at 2: what the package did before e693cdd) and
# the new default (libgomp's own spin, threads following the load). Arms alternate; a fresh server each.
# Repository root, venv active, the 1.5B prepared.   Usage: [HOSTS="idle busy"] [TAG=] bash run.sh SEED [SEED...]
# TAG names a later round's files (busy-new-s0$TAG.json) so an earlier commit's stay.
set -euo pipefail
out=bench/results/2026-12-08-cpu-threads
replay() {  # name busy(0/1) extra-env extra-args...
  local name=$1 busy=$2 envs=$3; shift 3
  local bp=""
  if [[ $busy == 1 ]]; then python $out/burn.py 1200 & bp=$!; sleep 1; fi
  echo "before $name: $(uptime)" >> $out/uptime.log
  env $envs dspark-lsp bench --lsp --lsp-no-compare --model default \
    --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 --lsp-chars 600 --max-new-tokens 32 \
    "$@" --json $out/$name.json > $out/$name.log 2>&1
  echo "after $name: $(uptime)" >> $out/uptime.log
  [[ -n $bp ]] && kill $bp
  return 0
}
tag=${TAG:-}
for seed in "$@"; do
  for host in ${HOSTS:-idle busy}; do
    busy=0; [[ $host == busy ]] && busy=1
    replay $host-old-s$seed$tag $busy GOMP_SPINCOUNT=1000 --lsp-threads 2 --seed $seed
    replay $host-new-s$seed$tag $busy DSPARK_X=1 --seed $seed
  done
done
