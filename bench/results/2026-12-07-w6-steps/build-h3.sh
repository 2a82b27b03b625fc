#!/usr/bin/env bash
# Builds one carry (.carry/h3.txz) for calls F2, G1 and H3: kvtier and its CUDA module,
# kvtier_cuda_cudnn_test, kvtier_fp8_quality, kvtier_cuda_fp8_test, kvtier_cuda_bench and
# kvtier_cuda_backend_test (xz keeps their shared code once: about 25 MB), and the cuDNN MoE
# grouped-matmul probe (bench/micro/cudnn_moe.cu).
# usage (repository root): bash bench/results/2026-12-07-w6-steps/build-h3.sh
set -euo pipefail
ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_cudnn_test kvtier_fp8_quality kvtier_cuda_fp8_test \
  kvtier_cuda_bench kvtier_cuda_backend_test > /dev/null
/usr/local/cuda/bin/nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc -Ibench/micro \
  bench/micro/cudnn_moe.cu src/backend/cuda/cudnn_graph.cc -lcudnn -lcublas -o build/cudnn_moe
scripts/pack-carry.sh h3 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so \
  build/tests/backend_cuda/kvtier_cuda_cudnn_test build/tests/backend_cuda/kvtier_fp8_quality \
  build/tests/backend_cuda/kvtier_cuda_fp8_test build/tests/backend_cuda/kvtier_cuda_bench \
  build/tests/backend_cuda/kvtier_cuda_backend_test build/cudnn_moe
