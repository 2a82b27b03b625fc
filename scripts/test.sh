#!/usr/bin/env bash
# Installs everything, builds, and runs every test suite: the normal build (CUDA code
# compiled where nvcc exists; GPU tests skip without a GPU), then the whole suite again
# under AddressSanitizer + UBSan.
# usage: scripts/test.sh [--no-sanitizers]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitizers=1
[ "${1:-}" = "--no-sanitizers" ] && sanitizers=0
"$root/scripts/install-deps.sh"
if [ -x "$root/scripts/setup-tokenizer-oracle.sh" ]; then "$root/scripts/setup-tokenizer-oracle.sh"; fi
jobs=$(nproc)

echo "== build: RelWithDebInfo"
"$root/scripts/build.sh" "$root/build-test" -DKVTIER_BINDINGS_GO=ON -DKVTIER_BINDINGS_JAVA=ON -DKVTIER_BINDINGS_CSHARP=ON
echo "== tests: RelWithDebInfo"
ctest --test-dir "$root/build-test" --output-on-failure -j "$jobs"

if [ "$sanitizers" = 1 ]; then
  echo "== build: AddressSanitizer + UBSan"
  "$root/scripts/build.sh" "$root/build-asan" -DKVTIER_SANITIZE=address -DKVTIER_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
  echo "== tests: AddressSanitizer + UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs"
fi
echo "== all test suites passed"
