#!/usr/bin/env bash
# Builds and checks the editor clients: the VS Code extension (npm ci, compile, lint, unit tests,
# .vsix package, load of the packaged entry point against the mock server) and the Neovim plugin
# (headless end-to-end tests). Exits non-zero on the first failure. Needs: node 20 + npm, python3;
# installs Debian's neovim when nvim is missing (root + apt). Called by .ci/run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python="python3"; fi
fi

step() { printf '\n== editors: %s\n' "$*"; }

step "tools"
command -v node >/dev/null || { echo "node is required (Node 20+)"; exit 1; }
if ! command -v nvim >/dev/null; then
  if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null
  else
    echo "nvim is missing and cannot be installed here (need root + apt-get)"; exit 1
  fi
fi
echo "node $(node --version), npm $(npm --version), $(nvim --version | head -1), python: $python"

step "settings schema: package.json and the Neovim schema.lua are as generated"
(cd "$repo" && "$python" -m dspark_lsp.lsp.settings_schema --check)

step "VS Code: npm ci"
cd "$here/vscode"
npm ci --no-audit --no-fund --loglevel=error
step "VS Code: compile"
npm run --silent compile
step "VS Code: lint"
npm run --silent lint
step "VS Code: unit tests"
node --test out/test/
step "VS Code: package .vsix"
rm -f dspark-lsp.vsix
npx --no-install vsce package --out dspark-lsp.vsix 2>&1 | grep -v "^ WARNING .*bundle your extension" || true
test -s dspark-lsp.vsix
step "VS Code: load the packaged extension and get a completion (mock server)"
mock_server="$(mktemp -d)/dspark-lsp"
printf '#!/bin/sh\nexec %s %s "$@"\n' "$python" "$here/test/mock_lsp.py" > "$mock_server"
chmod +x "$mock_server"
node out/scripts/checkVsix.js dspark-lsp.vsix "$mock_server" "return 42  # from dspark"

if [[ "${EDITORS_CI_SKIP_NVIM_TESTS:-}" == 1 ]]; then
  # .ci/run sets this: its full pytest run includes tests/clients/test_nvim_e2e.py already.
  echo "editors: Neovim tests left to the main pytest run"
else
  step "Neovim: headless end-to-end tests"
  cd "$repo"
  "$python" -m pytest -q -p no:cacheprovider tests/clients/test_nvim_e2e.py
fi
echo "editors: all checks passed"
