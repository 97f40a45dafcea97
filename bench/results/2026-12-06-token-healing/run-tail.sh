#!/usr/bin/env bash
# After run-chain.sh: TypeScript's holes with the window alone (1,024 tokens of the file: what the server sends
# for TypeScript by default, contextDefinitionLanguages being python,go), spm + healing, to set against +defs.
set -u
cd "$(dirname "$0")"; repo=$(cd ../../.. && pwd)
while ! grep -q chain-done uptime.log; do sleep 20; done
uptime >>uptime.log
flock /tmp/dspark-cpu.lock dspark-lsp eval --repo "$repo/bench/repo" --model default --variants window --langs typescript \
  --limit 40 --llamacpp off --threads 1 --prefix-share 0.75 --max-new-tokens 48 --fim-order spm --out repo-spm-heal-ts-window \
  >repo-spm-heal-ts-window.log 2>&1
uptime >>uptime.log
echo tail-done >>uptime.log
