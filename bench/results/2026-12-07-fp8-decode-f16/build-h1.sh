#!/usr/bin/env bash
# Builds one carry (.carry/h1.txz) for calls F2 and G1 together (the device call's working tree
# and carry must fit 64 MiB): kvtier and its CUDA module, kvtier_cuda_cudnn_test,
# kvtier_fp8_quality and kvtier_cuda_fp8_test (no kvtier_cuda_bench: G1 skips its part 3).
# usage (repository root): bash bench/results/2026-12-07-fp8-decode-f16/build-h1.sh
set -euo pipefail
ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_cudnn_test kvtier_fp8_quality kvtier_cuda_fp8_test > /dev/null
scripts/pack-carry.sh h1 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so \
  build/tests/backend_cuda/kvtier_cuda_cudnn_test build/tests/backend_cuda/kvtier_fp8_quality \
  build/tests/backend_cuda/kvtier_cuda_fp8_test
