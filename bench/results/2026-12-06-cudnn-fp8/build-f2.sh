#!/usr/bin/env bash
# Builds call F2's carry (.carry/f2.txz): kvtier and its CUDA module, kvtier_cuda_cudnn_test and
# kvtier_fp8_quality.
# usage (repository root): bash bench/results/2026-12-06-cudnn-fp8/build-f2.sh
set -euo pipefail
ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_cudnn_test kvtier_fp8_quality > /dev/null
scripts/pack-carry.sh f2 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so \
  build/tests/backend_cuda/kvtier_cuda_cudnn_test build/tests/backend_cuda/kvtier_fp8_quality
