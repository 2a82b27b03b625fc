#!/usr/bin/env bash
# Builds call S3's carry from a clean checkout with a configured build/: kvtier_cuda_bench and
# kvtier_cuda_skinny_test as committed (_f), and kvtier_cuda_bench with
# src/backend/cuda/skinny_gemm_finish.cuh as it was before the commit that changed it (_a).
# usage (repository root): bash bench/results/2026-12-06-decode-fixed-costs/build-s3.sh [REV]
# (REV: the finish as of that revision for _a; default: before the last commit touching it).
set -euo pipefail
git diff --quiet -- src tests || { echo "src or tests have changes: commit or stash them first"; exit 1; }
f=src/backend/cuda/skinny_gemm_finish.cuh
rev=${1:-$(git log -1 --format=%H -- $f)~1}
B=build/tests/backend_cuda
rm -rf .carry/s3 .carry/s3.txz
mkdir -p .carry/s3/variants
ninja -C build kvtier_cuda_bench kvtier_cuda_skinny_test > /dev/null
cp $B/kvtier_cuda_bench .carry/s3/variants/kvtier_cuda_bench_f
cp $B/kvtier_cuda_skinny_test .carry/s3/variants/kvtier_cuda_skinny_test_f
git show "$rev:$f" > $f
trap 'git checkout -- '$f ERR
ninja -C build kvtier_cuda_bench > /dev/null
cp $B/kvtier_cuda_bench .carry/s3/variants/kvtier_cuda_bench_a
git checkout -- $f
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
