#!/usr/bin/env bash
# One device call: W6 and W6c (local disk and Redis phases), then W6b in a new process over
# W6's disk file (scripts/run-bench.sh), from binaries built on the CPU machine and carried
# in .carry/d.txz (scripts/device-carry.sh + scripts/carry-redis.sh). Results in $OUT/r.
set -u
mkdir -p /tmp/d "$OUT/r"
tar xJf .carry/d.txz -C /tmp/d
C=/tmp/d/d
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
WORKLOADS=W6,W6c SKIP_ANCHORS=1 F16_WORKLOADS=none FP8_WORKLOADS=none FP8KV_WORKLOADS=none \
  MODEL_DIR=/tmp/kb/llama3-8b TIER_DIR=/tmp/kb/tiers TIER_TIME_LIMIT=60 \
  bash scripts/run-bench.sh "$C" "$OUT/r" > "$OUT/r/run-bench.log" 2>&1
echo "rc=$? at $SECONDS s" >> "$OUT/r/run-bench.log"
tail -40 "$OUT/r/run-bench.log"
