#!/usr/bin/env bash
# Typing replays of the 1.5B with three prefill variants, alternated seed by seed (repository root, venv
# active). Each variant is a git worktree; PYTHONPATH makes the server run that tree's package:
#   /tmp/wt-noint  commit 0891359 with check_interrupt a no-op (slices never stop between layers)
#   /tmp/wt-int    commit 0891359 (slices stop between layers; the stopped slice is dropped)
#   /tmp/wt-res    this change (the stopped slice is finished later from its layer, engine/resume.py)
set -euo pipefail
out=$(pwd)/bench/results/2026-12-07-resume
replay() {  # variant place seed
  local name=$2-1p5b-s$3-$1 extra=""
  [ "$2" = mid ] && extra=--lsp-mid-file
  echo "before $name: $(uptime)" >> $out/uptime.log
  (cd /tmp/wt-$1 && PYTHONPATH=/tmp/wt-$1 flock /tmp/dspark-cpu.lock python -m dspark_lsp bench --lsp --lsp-no-compare \
    --model qwen2.5-coder-1.5b $extra --lsp-file dspark_lsp/lsp/worker.py --lsp-open 8 --lsp-first-after 15 \
    --lsp-chars 600 --max-new-tokens 32 --seed "$3" --json $out/$name.json > $out/$name.log 2>&1)
  echo "after $name: $(uptime)" >> $out/uptime.log
}
replay noint end 0; replay int end 0; replay res end 0
replay res end 1; replay int end 1; replay noint end 1
replay int mid 0; replay res mid 0
replay res mid 1; replay int mid 1
