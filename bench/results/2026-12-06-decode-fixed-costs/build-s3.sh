#!/usr/bin/env bash
# Builds call S3's carry from a clean checkout with a configured build/: kvtier_cuda_bench and
# kvtier_cuda_skinny_test as committed (_f), and kvtier_cuda_bench with the skinny kernel's
# finish and pipelines (skinny_gemm_{finish,kernel,tma}.cuh) as of REV (_a).
# usage (repository root): bash bench/results/2026-12-06-decode-fixed-costs/build-s3.sh [REV]
# (default 6c88a3a: before this change's finish and lookahead).
set -euo pipefail
git diff --quiet -- src tests || { echo "src or tests have changes: commit or stash them first"; exit 1; }
files="src/backend/cuda/skinny_gemm_finish.cuh src/backend/cuda/skinny_gemm_kernel.cuh src/backend/cuda/skinny_gemm_tma.cuh"
rev=${1:-6c88a3a}
B=build/tests/backend_cuda
rm -rf .carry/s3 .carry/s3.txz
mkdir -p .carry/s3/variants
ninja -C build kvtier_cuda_bench kvtier_cuda_skinny_test > /dev/null
cp $B/kvtier_cuda_bench .carry/s3/variants/kvtier_cuda_bench_f
cp $B/kvtier_cuda_skinny_test .carry/s3/variants/kvtier_cuda_skinny_test_f
for f in $files; do git show "$rev:$f" > $f; done
trap 'git checkout -- '"$files" ERR
ninja -C build kvtier_cuda_bench > /dev/null
cp $B/kvtier_cuda_bench .carry/s3/variants/kvtier_cuda_bench_a
git checkout -- $files
trap - ERR
ninja -C build kvtier_cuda_bench > /dev/null
scripts/device-carry.sh .carry/s3 .carry/s3/variants/kvtier_cuda_skinny_test_f .carry/s3/variants/kvtier_cuda_bench_a > /dev/null
rm -f .carry/s3/bin/*
mv .carry/s3/variants/* .carry/s3/bin/ && rmdir .carry/s3/variants
cp -r ../shared/anchors .carry/s3/
git rev-parse --short HEAD > .carry/s3/COMMIT
echo "$rev" > .carry/s3/BASE
pwd > .carry/s3/SOURCE_DIR
strip --strip-all .carry/s3/bin/*
strip --strip-unneeded .carry/s3/lib/*
(cd .carry && tar cf - s3 | xz --x86 --lzma2=preset=9e,dict=192MiB -T2 > s3.txz)
ls -la .carry/s3.txz
