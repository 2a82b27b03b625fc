#!/usr/bin/env bash
# Builds call F1's carry (.carry/f1.txz): the fp8 attention probe (by the line atop its .cu),
# kvtier and its CUDA module, kvtier_cuda_cudnn_test and kvtier_fp8_quality.
# usage (repository root): bash bench/results/2026-12-06-cudnn-fp8/build-f1.sh
set -euo pipefail
ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_cudnn_test kvtier_fp8_quality > /dev/null
mkdir -p /tmp/f8
nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc -Ibench/micro bench/micro/cudnn_sdpa_fp8.cu \
  src/backend/cuda/cudnn_graph.cc -lcudnn -o /tmp/f8/cudnn_sdpa_fp8
scripts/pack-carry.sh f1 /tmp/f8/cudnn_sdpa_fp8 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so \
  build/tests/backend_cuda/kvtier_cuda_cudnn_test build/tests/backend_cuda/kvtier_fp8_quality
