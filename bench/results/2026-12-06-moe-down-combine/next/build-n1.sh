#!/usr/bin/env bash
# Builds call N1's carry from a clean checkout of main with a configured build/ (README's
# build): kvtier_cuda_bench and kvtier_cuda_moe_test for main and three variants, each the
# patches of this folder applied on main's sources, then put back:
#   a  main (call M4's kernels)
#   b  1-down-unpredicated: the chunked down+combine adds every column of its registers, as in
#      call M2's build (M2: Qwen3-30B-A3B W1 3.49 ms bf16 / 2.63 ms fp8; M4: 3.79 / 2.92)
#   c  b + 2-expert-gemv-chunked: the per-route gate|up GEMV loads its pieces in chunks of 16
#   d  b + 3-router-int-topk: the routing's top-k by integer warp reductions
# Then the usual carry: scripts/device-carry.sh, anchors, COMMIT, strip, tar | xz --x86.
# usage (repository root): bash bench/results/2026-12-06-moe-down-combine/next/build-n1.sh
set -euo pipefail
here=bench/results/2026-12-06-moe-down-combine/next
git diff --quiet -- src || { echo "src has changes: commit or stash them first"; exit 1; }
rm -rf .carry/n1 .carry/n1.txz
mkdir -p .carry/n1/variants
B=build/tests/backend_cuda
build() {  # build NAME PATCH...
  local name=$1; shift
  for p in "$@"; do git apply "$here/$p"; done
  ninja -C build kvtier_cuda_bench kvtier_cuda_moe_test > /dev/null
  cp $B/kvtier_cuda_bench .carry/n1/variants/kvtier_cuda_bench_$name
  cp $B/kvtier_cuda_moe_test .carry/n1/variants/kvtier_cuda_moe_test_$name
  git checkout -- src
}
build a
build b 1-down-unpredicated.patch
build c 1-down-unpredicated.patch 2-expert-gemv-chunked.patch
build d 1-down-unpredicated.patch 3-router-int-topk.patch
ninja -C build kvtier_cuda_bench > /dev/null  # build/ back to main
scripts/device-carry.sh .carry/n1 $B/kvtier_cuda_bench > /dev/null
rm .carry/n1/bin/kvtier_cuda_bench
mv .carry/n1/variants/* .carry/n1/bin/ && rmdir .carry/n1/variants
cp -r ../shared/anchors .carry/n1/
git rev-parse --short HEAD > .carry/n1/COMMIT
pwd > .carry/n1/SOURCE_DIR
strip --strip-all .carry/n1/bin/*
strip --strip-unneeded .carry/n1/lib/*
(cd .carry && tar cf - n1 | xz --x86 --lzma2=preset=9e,dict=192MiB -T1 > n1.txz)
ls -la .carry/n1.txz
