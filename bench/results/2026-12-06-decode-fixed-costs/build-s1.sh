#!/usr/bin/env bash
# Builds the carry of calls S1 and S2 from a clean checkout with a configured build/ (README's
# build): main's kvtier_cuda_bench (_a) and kvtier_cuda_skinny_test (the W8A8 trace bench), and
# the programs of main with ../2026-12-06-moe-route-norm/next/qkv-post-epilogue.patch applied
# (_q: QkvPost in the one-row qkv GEMV's epilogue); then the usual carry (device-carry.sh,
# anchors, COMMIT, SOURCE_DIR, strip, tar | xz --x86).
# usage (repository root): bash bench/results/2026-12-06-decode-fixed-costs/build-s1.sh
set -euo pipefail
patch=bench/results/2026-12-06-moe-route-norm/next/qkv-post-epilogue.patch
git diff --quiet -- src tests || { echo "src or tests have changes: commit or stash them first"; exit 1; }
B=build/tests/backend_cuda
rm -rf .carry/s1 .carry/s1.txz
mkdir -p .carry/s1/variants
git apply $patch
trap 'git apply -R '$patch' 2>/dev/null || true' ERR
ninja -C build kvtier_cuda_bench kvtier_cuda_kernels_test kvtier_cuda_backend_test > /dev/null
for p in kvtier_cuda_bench kvtier_cuda_kernels_test kvtier_cuda_backend_test; do cp $B/$p .carry/s1/variants/${p}_q; done
git apply -R $patch
trap - ERR
ninja -C build kvtier_cuda_bench kvtier_cuda_skinny_test > /dev/null
scripts/device-carry.sh .carry/s1 $B/kvtier_cuda_bench $B/kvtier_cuda_skinny_test \
  .carry/s1/variants/kvtier_cuda_backend_test_q > /dev/null
mv .carry/s1/bin/kvtier_cuda_bench .carry/s1/bin/kvtier_cuda_bench_a
rm -f .carry/s1/bin/kvtier_cuda_backend_test_q
mv .carry/s1/variants/* .carry/s1/bin/ && rmdir .carry/s1/variants
cp -r ../shared/anchors .carry/s1/
git rev-parse --short HEAD > .carry/s1/COMMIT
pwd > .carry/s1/SOURCE_DIR
strip --strip-all .carry/s1/bin/*
strip --strip-unneeded .carry/s1/lib/*
(cd .carry && tar cf - s1 | xz --x86 --lzma2=preset=9e,dict=192MiB -T2 > s1.txz)
ls -la .carry/s1.txz
