#!/bin/bash
# Issue 32: DSpark on the 1.5B target against llama.cpp's speculative modes here: prompt lookup
# (llama-cpp-python) and a 0.5B draft model (llama.cpp's own llama-speculative-simple example).
# The commands as they were run (2026-12-06/07 UTC, commit e1de864 + this folder's working-tree changes),
# from the repository root with the venv active.
set -euo pipefail
OUT=bench/results/2026-12-07-llamacpp-draft

# This host (lscpu "AMD EPYC", family 25 model 1) has AVX2 but no AVX-512: /proc/cpuinfo lists no avx512*
# and the kernel enables no ZMM state (dmesg: XSAVE x87/SSE/AVX only); a test program built with
# -mavx512bf16/-mavx512vnni/-mavx512vbmi died with SIGILL here. So AVX2 flags, not the AVX-512 set of the
# Intel Xeon of ../2026-12-06-host/.
FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

# 1. llama.cpp's draft-model speculative examples, from llama-cpp-python 0.3.36's vendored source
#    (llama.cpp 0.5.0-dev, ggml 0.25.3). About 8 min for both on 2 busy cores.
pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: -d /tmp/lcpp
tar xzf /tmp/lcpp/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcpp
SRC=/tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp
# shellcheck disable=SC2086
nice -n 19 cmake -S $SRC -B /tmp/lcpp/build -DCMAKE_BUILD_TYPE=Release $FLAGS \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF
nice -n 19 cmake --build /tmp/lcpp/build --config Release -j2 --target llama-speculative-simple llama-speculative

# 2. llama-cpp-python itself (llamacpp_greedy, llamacpp_lookup), same flags. About 16 min on 2 busy cores.
CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 pip install -v llama-cpp-python==0.3.36

# 3. The bench. The host is shared: every timing run holds the lock, `uptime` goes to uptime.log before and
#    after. The wait for a 1-min load <= 1.5 was used for the last two full runs only (see README).
export DSPARK_LLAMACPP_SPEC_BIN=/tmp/lcpp/build/bin/llama-speculative-simple
wait_quiet() { while [ "$(awk '{print ($1 > 1.5)}' /proc/loadavg)" = 1 ]; do sleep 30; done; }
bench() {  # $1: the run's name; the rest: extra bench flags
  local name=$1; shift
  echo "before $name.json: $(uptime)" >> $OUT/uptime.log
  flock /tmp/dspark-cpu.lock dspark-lsp bench --model qwen2.5-coder-1.5b --limit 1 --sets single,multi,span \
    --corpus bench/corpus --max-new-tokens 32 --threads 2 "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "after $name.json: $(uptime)" >> $OUT/uptime.log
}
ALL=target_only,llamacpp_greedy,llamacpp_lookup,llamacpp_draft,dspark

# The run: llamacpp_draft at the binary's default draft length (3).
bench 1p5b --methods $ALL
# Draft-length sweep (llamacpp_draft beside target_only only).
for N in 1 2 4 6; do bench draft-max-$N --methods target_only,llamacpp_draft --llamacpp-draft-max $N; done
# Does -lv 5 (the per-round debug lines the bench reads) slow the binary? Same prompt, alternating.
P=$'<|fim_prefix|>import os\n\n\ndef list_python_files(root):\n    """Every .py file under root, sorted."""\n    out = []\n    for dirpath, _dirs, files in os.walk(root):\n<|fim_suffix|>\n    return sorted(out)\n<|fim_middle|>'
G=~/.cache/dspark-lsp/gguf
echo "lv A/B before: $(uptime)" >> $OUT/uptime.log
for i in 1 2 3; do for lv in 5 3; do
  flock /tmp/dspark-cpu.lock $DSPARK_LLAMACPP_SPEC_BIN -m $G/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
    -md $G/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --spec-type draft-simple -p "$P" --no-escape -n 31 --temp 0 \
    --top-k 1 --seed 0 -c 256 -b 256 -ub 256 -t 2 -tb 2 -td 2 -tbd 2 -fa off --log-jsonl --log-timestamps \
    -lv $lv > /tmp/lcpp/ab.out 2>&1
  echo "lv=$lv $(grep -o 'decoded[^,]*' /tmp/lcpp/ab.out)"
done; done
echo "lv A/B after: $(uptime)" >> $OUT/uptime.log
# The full set again at the sweep's two best draft lengths.
wait_quiet; bench 1p5b-draft-max-2 --methods $ALL --llamacpp-draft-max 2
wait_quiet; bench 1p5b-draft-max-1 --methods $ALL --llamacpp-draft-max 1
