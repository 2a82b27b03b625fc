#!/usr/bin/env bash
# Call R2 (issue #41), after R1: Qwen3-30B-A3B end to end, W1 and W2 in one process each, the
# experts of prefill-sized steps on the grouped skinny kernel (KVTIER_CUDA_MOE_SKINNY=1) against
# the tiles (0), bf16 and fp8 weights + fp8 KV, with this call's ceilings.
# Carry r2: scripts/pack-carry.sh r2 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-570} CARRY=r2 . bench/results/device-call-prelude.sh; link_source_dir
M=/dev/shm/qwen3-30b-a3b
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $M > $R/mkmodel-qwen3moe.txt 2>&1 &
mk=$!
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
for skinny in 1 0; do
  KVTIER_CUDA_MOE_SKINNY=$skinny kbench qwen3moe-bf16-s$skinny W1,W2 --weight-dtype bf16
  KVTIER_CUDA_MOE_SKINNY=$skinny kbench qwen3moe-fp8-s$skinny W1,W2 --weight-dtype fp8 --kv-dtype fp8
  tar czf $OUT/r2.tgz -C /tmp r
done
