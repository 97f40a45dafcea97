#!/usr/bin/env bash
# The rebuild A/B on both targets: one process per model flips the kernel's rebuild path ("rows", the 8-lane
# rebuild before this change, against "fast") in ABBA order; then one process of BASE (a checkout of the
# commit before, which has no switch) prints its logits hashes and times for comparison.
# Usage: flock /tmp/dspark-cpu.lock bash run.sh OUT BASE [rounds]   (the shared host's CPU lock around it all)
set -euo pipefail
out=$1 base=$2 rounds=${3:-8}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
for model in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do
  { date -u; uptime; } | tee -a "$out/uptime.log"
  PYTHONPATH="$repo" python "$here/rebuild_ab.py" "$model" --rounds "$rounds" 2>/dev/null | tee "$out/ab-$model.txt"
  { date -u; uptime; } | tee -a "$out/uptime.log"
  PYTHONPATH="$base" python "$here/rebuild_ab.py" "$model" --rounds 2 2>/dev/null | tee "$out/base-$model.txt"
done
