#!/usr/bin/env bash
# What ran after run-quality.sh, in this order (run-after.sh's llama.cpp pass was stopped at hole 47 of 120 to let
# the timing runs go first; it resumes last, with two threads): the default pair's typing replays, the 1.5B's
# (run-1p5b.sh), the llama.cpp peer, and the repository set with spm at the default prefix share.
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
bash run-replay.sh default "0 1"
echo after-done >>uptime.log
bash run-1p5b.sh
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants +defs --limit 40 \
  --llamacpp on --threads 2 --prefix-share 0.75 --max-new-tokens 48 --fim-order psm --out repo-psm >>repo-psm-peer.log 2>&1
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants +defs --limit 40 \
  --llamacpp off --threads 1 --max-new-tokens 48 --fim-order spm --out repo-spm-heal-share09 >repo-spm-heal-share09.log 2>&1
uptime >>uptime.log
echo chain-done >>uptime.log
