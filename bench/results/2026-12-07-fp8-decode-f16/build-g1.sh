#!/usr/bin/env bash
# Builds call G1's carry (.carry/g1.txz): kvtier and its CUDA module, kvtier_cuda_fp8_test and
# kvtier_cuda_bench.
# usage (repository root): bash bench/results/2026-12-07-fp8-decode-f16/build-g1.sh
set -euo pipefail
ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_fp8_test kvtier_cuda_bench > /dev/null
scripts/pack-carry.sh g1 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so \
  build/tests/backend_cuda/kvtier_cuda_fp8_test build/tests/backend_cuda/kvtier_cuda_bench
