#!/usr/bin/env bash
# Builds call T1's carry (.carry/t1.txz): call S4's programs (build-s3.sh's .carry/s3, built
# first) plus kvtier and its CUDA module as committed.
# usage (repository root): bash bench/results/2026-12-06-prefill-steps/build-t1.sh
set -euo pipefail
git diff --quiet -- src tools || { echo "src or tools have changes: commit or stash them first"; exit 1; }
[ -d .carry/s3/bin ] || { echo "build .carry/s3 first (2026-12-06-decode-fixed-costs/build-s3.sh)"; exit 1; }
ninja -C build kvtier_cli kvtier_cuda > /dev/null
rm -rf .carry/t1 .carry/t1.txz
cp -r .carry/s3 .carry/t1
scripts/device-carry.sh .carry/t1 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so > /dev/null
git rev-parse --short HEAD > .carry/t1/COMMIT
strip --strip-all .carry/t1/bin/kvtier
strip --strip-unneeded .carry/t1/lib/*
(cd .carry && tar cf - t1 | xz --x86 --lzma2=preset=9e,dict=192MiB -T2 > t1.txz)
ls -la .carry/t1.txz
