#!/usr/bin/env bash
# After run-quality.sh: llama.cpp as the peer on the psm run's stored prompts (its own /infill arrangement; the
# healed prompts would be unfair to a decoder without the constraint), the repository set with spm + healing at
# the default prefix share (0.9), then the typing replays of the default pair.
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
while ! grep -q quality-done uptime.log; do sleep 20; done
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants +defs --limit 40 \
  --llamacpp on --threads 1 --prefix-share 0.75 --max-new-tokens 48 --fim-order psm --out repo-psm >repo-psm-peer.log 2>&1
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants +defs --limit 40 \
  --llamacpp off --threads 1 --max-new-tokens 48 --fim-order spm --out repo-spm-heal-share09 >repo-spm-heal-share09.log 2>&1
bash run-replay.sh default "0 1"
echo after-done >>uptime.log
