#!/usr/bin/env bash
# Builds call N4's carry from main with a configured build/ (README's build): kvtier_cuda_bench,
# then the usual carry (scripts/device-carry.sh, anchors, COMMIT, strip, tar | xz --x86).
# usage (repository root): bash bench/results/2026-12-06-moe-route-norm/next/build-n4.sh
set -euo pipefail
B=build/tests/backend_cuda
rm -rf .carry/n4 .carry/n4.txz
ninja -C build kvtier_cuda_bench > /dev/null
scripts/device-carry.sh .carry/n4 $B/kvtier_cuda_bench > /dev/null
cp -r ../shared/anchors .carry/n4/
git rev-parse --short HEAD > .carry/n4/COMMIT
pwd > .carry/n4/SOURCE_DIR
strip --strip-all .carry/n4/bin/*
strip --strip-unneeded .carry/n4/lib/*
(cd .carry && tar cf - n4 | xz --x86 --lzma2=preset=9e,dict=192MiB -T1 > n4.txz)
ls -la .carry/n4.txz
