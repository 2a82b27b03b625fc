#!/usr/bin/env bash
# Builds call T3's carry (.carry/t3.txz): kvtier and its CUDA module as committed, two more
# CUDA modules whose GatedMulFp8 spreads rows over 2 (s2) or 4 (s4) CTAs of a cluster also when
# the rows alone fill the GPU (CtasPerGatedRow), and bench/micro/fp8_activation_rows.
# usage (repository root): bash bench/results/2026-12-06-prefill-steps/build-t3.sh
set -euo pipefail
git diff --quiet -- src tools bench/micro || { echo "src, tools or bench/micro have changes: commit or stash them first"; exit 1; }
f=src/backend/cuda/fp8_activations.cu
ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_impl > /dev/null
mkdir -p /tmp/t3
cp build/src/backend/cuda/libkvtier_cuda.so /tmp/t3/libkvtier_cuda.so
nvcc -O3 -std=c++17 -arch=sm_90a -Isrc -Ibench/micro --expt-relaxed-constexpr bench/micro/fp8_activation_rows.cu \
  src/backend/cuda/fp8_activations.cu build/src/backend/cuda/libkvtier_cuda_impl.a -lcuda -o /tmp/t3/fp8_activation_rows
trap 'git checkout -- '"$f" ERR
for n in 2 4; do
  git checkout -- $f
  sed -i "s|  if (rows >= sms) return 1;|  if (rows >= sms) return SpreadFits(dim, $n, gate_up, codes) ? $n : 1;|" $f
  grep -q "SpreadFits(dim, $n, gate_up, codes) ? $n : 1" $f
  ninja -C build kvtier_cuda > /dev/null
  cp build/src/backend/cuda/libkvtier_cuda.so /tmp/t3/libkvtier_cuda_s$n.so
done
git checkout -- $f
trap - ERR
ninja -C build kvtier_cuda > /dev/null
scripts/pack-carry.sh t3 build/tools/kvtier/kvtier /tmp/t3/libkvtier_cuda.so /tmp/t3/libkvtier_cuda_s2.so \
  /tmp/t3/libkvtier_cuda_s4.so /tmp/t3/fp8_activation_rows
