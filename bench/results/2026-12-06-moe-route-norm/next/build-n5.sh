#!/usr/bin/env bash
# Builds call N5's carry from a clean main with a configured build/ (README's build): the
# programs of main (_a) and of main with qkv-post-epilogue.patch applied (_q): QkvPost run in
# the one-row qkv GEMV's epilogue (gemv_qkv_post.h). Then the usual carry.
# usage (repository root): bash bench/results/2026-12-06-moe-route-norm/next/build-n5.sh
set -euo pipefail
here=bench/results/2026-12-06-moe-route-norm/next
git diff --quiet -- src tests || { echo "src or tests have changes: commit or stash them first"; exit 1; }
B=build/tests/backend_cuda
rm -rf .carry/n5 .carry/n5.txz
mkdir -p .carry/n5/variants
git apply $here/qkv-post-epilogue.patch
ninja -C build kvtier_cuda_bench kvtier_cuda_kernels_test kvtier_cuda_backend_test > /dev/null
for p in kvtier_cuda_bench kvtier_cuda_kernels_test kvtier_cuda_backend_test; do cp $B/$p .carry/n5/variants/${p}_q; done
git apply -R $here/qkv-post-epilogue.patch
ninja -C build kvtier_cuda_bench > /dev/null
scripts/device-carry.sh .carry/n5 $B/kvtier_cuda_bench .carry/n5/variants/kvtier_cuda_backend_test_q > /dev/null
mv .carry/n5/bin/kvtier_cuda_bench .carry/n5/bin/kvtier_cuda_bench_a
rm -f .carry/n5/bin/kvtier_cuda_backend_test_q
mv .carry/n5/variants/* .carry/n5/bin/ && rmdir .carry/n5/variants
cp -r ../shared/anchors .carry/n5/
git rev-parse --short HEAD > .carry/n5/COMMIT
pwd > .carry/n5/SOURCE_DIR
strip --strip-all .carry/n5/bin/*
strip --strip-unneeded .carry/n5/lib/*
(cd .carry && tar cf - n5 | xz --x86 --lzma2=preset=9e,dict=192MiB -T1 > n5.txz)
ls -la .carry/n5.txz
