#!/usr/bin/env bash
# The typing replay at the server's defaults, before and after the look-ahead warm-up, seed by seed
# interleaved. Usage: bash run.sh BEFORE_CHECKOUT AFTER_CHECKOUT OUT_DIR (venv active with this package
# installed editable; a quiet host). Each run's code is its checkout's: cwd and PYTHONPATH there
# (`python -m dspark_lsp.lsp`, the server the replay starts, puts the cwd first on sys.path). Both type the
# same file, the after checkout's dspark_lsp/lsp/worker.py, with its 8 siblings open.
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); out=$(realpath "$3")
mkdir -p "$out"
typed="$after/dspark_lsp/lsp/worker.py"
one() {  # NAME CHECKOUT SEED
  (cd "$2" && export PYTHONPATH="$2" && uptime >> "$out/uptime.log" &&
   dspark-lsp bench --lsp --lsp-no-compare --lsp-file "$typed" --lsp-open 8 --lsp-first-after 8 \
     --lsp-chars 600 --max-new-tokens 32 --lsp-context 256 --context-window 768 --prefix-share 0.9 \
     --seed "$3" --json "$out/$1.json" > /dev/null && echo "$1 $(date +%T)" >> "$out/uptime.log")
}
for seed in 0 1 2 3; do
  one "after-s$seed" "$after" "$seed"
  one "before-s$seed" "$before" "$seed"
done
