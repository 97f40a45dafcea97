#!/usr/bin/env bash
# The 1.5B's forwards per arm "SPIN:THREADS", a fresh process each (fwd_threads.py), idle or with one core
# busy (burn.py). Repository root, venv active.  Usage: bash forwards.sh ROUNDS "1000:2 300000:2 ..." [busy]
set -u
out=bench/results/2026-12-08-cpu-threads
rounds=$1; arms=$2; busy=${3:-}; duty=${4:-1}
for r in $(seq 1 "$rounds"); do for a in $arms; do
  spin=${a%:*}; th=${a#*:}
  bp=""; if [[ -n $busy ]]; then python $out/burn_duty.py 600 "$duty" & bp=$!; sleep 1; fi
  echo "r$r load $(cut -d' ' -f1 /proc/loadavg) burn=${busy:-no} duty=$duty $(GOMP_SPINCOUNT=$spin THREADS=$th python $out/fwd_threads.py 2>/dev/null)"
  [[ -n $bp ]] && kill $bp
done; done
# (busy: burn_duty.py at DUTY, default 1 = a whole core.) Run as: flock /tmp/dspark-cpu.lock bash forwards.sh 3 "1000:2 300000:2 300000:1" > forwards-idle.log
#         flock /tmp/dspark-cpu.lock bash forwards.sh 2 "1000:2 300000:2 300000:1 1000:1" busy > forwards-busy.log
#         flock /tmp/dspark-cpu.lock bash forwards.sh 2 "1000:2 300000:2 300000:1" busy 0.4 > forwards-duty40.log
