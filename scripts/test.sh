#!/usr/bin/env bash
# Installs everything, builds, and runs every test suite: the normal build (CUDA code
# compiled where nvcc exists; GPU tests skip without a GPU), then the whole suite again
# under AddressSanitizer + UBSan with the fuzz targets run for a bounded time
# (KVTIER_FUZZ_SECONDS each, default 20), then the threaded tests under ThreadSanitizer.
# usage: scripts/test.sh [--no-sanitizers]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitizers=1
[ "${1:-}" = "--no-sanitizers" ] && sanitizers=0
"$root/scripts/install-deps.sh"
"$root/scripts/setup-oracles.sh"
jobs=$(nproc)
started=$SECONDS
# Each phase's header says when it began, so a slow phase shows in CI's log.
phase() { echo "== $* [$(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s]"; }
phase "size limits of src/ (STYLE.md)"
python3 "$root/scripts/check-sizes.py" "$root/src"

# The ten slowest tests of a build's last ctest run (CTest's own record of their times).
slowest() {
  local costs="$1/Testing/Temporary/CTestCostData.txt"
  [ -f "$costs" ] || return 0
  echo "== ten slowest tests in $(basename "$1") (seconds)"
  awk '/^---/ {exit} NF == 3 {printf "%8.1f  %s\n", $3, $1}' "$costs" | sort -rn | head -n 10 || true
}

# ctest, and on a failure a short account at the end of the output: each failing
# GoogleTest assertion with its file and line, and each sanitizer report's first lines,
# which a long test log would bury.
run_ctest() {
  local dir=$1; shift
  if ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@"; then
    slowest "$dir"
    return 0
  fi
  local log="$dir/Testing/Temporary/LastTest.log"
  if [ -f "$log" ]; then
    echo "== failing assertions (from $log)"
    grep -E -A8 '(: Failure$|^\[  FAILED  \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+ \(|ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|runtime error:)' "$log" | head -n 150 || true
  fi
  return 1
}

# The test builds keep line tables only (-g1): a failure's stack trace, a sanitizer report
# and a debugger's backtrace still name files and lines, with smaller objects to write and
# link. Full debug information (types and locals) is read only by the ABI check, and the C
# API's sources keep it (src/api/CMakeLists.txt).
lines_only=-g1
# All three builds are unity builds (KVTIER_UNITY_BUILD, CMakeLists.txt): kvtier_core, the CLI and the
# test binaries compiled a batch of sources at a time, which parses the headers they share
# once a batch; most of this script's time is compiling.
unity=-DKVTIER_UNITY_BUILD=ON
# Without a GPU the CUDA code only has to compile, and nothing would run its machine code:
# PTX only (KVTIER_CUDA_PTX_ONLY), which skips ptxas, a quarter of the CUDA compile time.
cuda_ptx=()
nvidia-smi -L >/dev/null 2>&1 || cuda_ptx=(-DKVTIER_CUDA_PTX_ONLY=ON)
phase "build: RelWithDebInfo (line tables only)"
"$root/scripts/build.sh" "$root/build-test" "$unity" "${cuda_ptx[@]}" -DKVTIER_BINDINGS_GO=ON -DKVTIER_BINDINGS_JAVA=ON -DKVTIER_BINDINGS_CSHARP=ON \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 $lines_only -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $lines_only -DNDEBUG"
phase "tests: RelWithDebInfo"
run_ctest "$root/build-test"

if [ "$sanitizers" = 1 ]; then
  # One clang build serves the whole suite under ASan+UBSan (LeakSanitizer included) and the
  # libFuzzer targets (KVTIER_FUZZ). See RELIABILITY.md for what each job covers.
  asan="$root/build-rel-asan"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  phase "build: AddressSanitizer + UBSan (clang, with libFuzzer targets)"
  # Debug (assertions on) at -O1, as the sanitizers' authors advise: the suite runs 3-5x
  # faster under ASan than at -O0 (engine_test 72 s against 353 s), with the same reports.
  CC=clang-14 CXX=clang++-14 "$root/scripts/build.sh" "$asan" "$unity" -DKVTIER_SANITIZE=address \
    -DKVTIER_CUDA=OFF -DKVTIER_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=$lines_only -O1" "-DCMAKE_CXX_FLAGS_DEBUG=$lines_only -O1"
  phase "tests: AddressSanitizer + UBSan (whole suite, soak, fuzz corpus replays)"
  run_ctest "$asan"

  fuzz_seconds=${KVTIER_FUZZ_SECONDS:-20}
  mkdir -p "$asan/fuzz-artifacts"
  # Each target fuzzes for fuzz_seconds on one core; $jobs of them at a time. New inputs go
  # to the scratch corpus; the committed seeds are read. A crash leaves its input in
  # fuzz-artifacts/ and fails the job.
  fuzz_one() {
    local target=$1 work="$asan/fuzz-corpus/$1"
    mkdir -p "$work"
    "$asan/tests/fuzz/$target" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -timeout=30 \
      -print_final_stats=1 -artifact_prefix="$asan/fuzz-artifacts/$target-" \
      "$work" "$root/tests/fuzz/corpus/$target" > "$asan/fuzz-artifacts/$target.log" 2>&1
  }
  fuzz_failed=()
  pending=(safetensors_fuzz gguf_fuzz config_fuzz tokenizer_fuzz disk_slot_fuzz c_api_fuzz grammar_fuzz)
  while [ "${#pending[@]}" -gt 0 ]; do
    batch=("${pending[@]:0:$jobs}")
    pending=("${pending[@]:$jobs}")
    pids=()
    for target in "${batch[@]}"; do
      echo "== fuzz: $target for ${fuzz_seconds}s"
      fuzz_one "$target" &
      pids+=($!)
    done
    for i in "${!batch[@]}"; do
      wait "${pids[$i]}" || fuzz_failed+=("${batch[$i]}")
      grep -v '^#[0-9]' "$asan/fuzz-artifacts/${batch[$i]}.log" || true
    done
  done
  if [ "${#fuzz_failed[@]}" -gt 0 ]; then
    echo "fuzz targets failed: ${fuzz_failed[*]}; inputs in $asan/fuzz-artifacts" >&2
    exit 1
  fi

  # ThreadSanitizer: only what runs threads (engine, C API, soak, the KV manager's disk I/O
  # threads), in its own build.
  tsan="$root/build-rel-tsan"
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  phase "build: ThreadSanitizer (clang; every test in tests/{engine,c_api,soak,kv})"
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$tsan" "${generator[@]}" "$unity" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVTIER_SANITIZE=thread -DKVTIER_CUDA=OFF "-DKVTIER_TEST_DIRS=engine;c_api;soak;kv" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 $lines_only -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $lines_only -DNDEBUG"
  # The whole build: KVTIER_TEST_DIRS already limits it to those directories, and a
  # target list here silently goes stale when a test is added to one of them.
  cmake --build "$tsan" -j "$jobs"
  phase "tests: ThreadSanitizer"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/soak/tsan.supp" \
    run_ctest "$tsan"
fi
phase "all test suites passed"
