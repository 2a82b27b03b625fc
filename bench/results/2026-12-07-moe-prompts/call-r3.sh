#!/usr/bin/env bash
# Call R3 (issue #41), after R1 and R2: kAuto's new default. The skinny kernel takes the MoE
# steps the library does not (MoeTileRun: the library first, then the skinny kernel from 32
# routes per expert, else the tiles), so Qwen3-30B-A3B's 16-bit experts keep the grouped library
# GEMMs from 1,024 rows (where R2's forced skinny lost W2's 2,048-row chunks) and take the skinny
# kernel from 512 rows; its fp8 experts take it from 512 rows on. Between 4 and 32 routes per
# expert (64 to 511 rows) the bench's 128 and 256 rows say whether the threshold can come down.
#   (1) kvtier_cuda_moe_bench qwen3 / mixtral at 1 to 2,048 rows (32, 128, 256, 1,024 added);
#   (2) the backend on the MoE presets against the CPU backend, with the new default;
#   (3) Qwen3-30B-A3B W1,W2 end to end, bf16 and fp8 weights + fp8 KV: the default against
#       KVTIER_CUDA_MOE_SKINNY=0, each in its own process, with this call's ceilings.
# Carry r3: scripts/pack-carry.sh r3 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/kvtier_cuda_{moe_bench,backend_test}
rm -rf /tmp/r
BUDGET=${BUDGET:-570} CARRY=r3 . bench/results/device-call-prelude.sh; link_source_dir
M=/dev/shm/qwen3-30b-a3b
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $M > $R/mkmodel-qwen3moe.txt 2>&1 &
mk=$!
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
for shape in ${SHAPES:-qwen3 mixtral}; do
  timeout 100 $C/bin/kvtier_cuda_moe_bench $shape > $R/moe_bench_$shape.txt 2>&1
  echo "[$(el) s] moe_bench $shape rc=$?"
  grep -E "rows +(32|128|256|1024) tile (auto|skinny |64x64|grouped)" $R/moe_bench_$shape.txt | cut -c1-100
done
t backend_moe 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*qwen3moe*:*mixtral*'
tar czf $OUT/r3.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
# bf16 first: its default is new (R2's fp8 row with skinny 1 is what fp8's default runs).
kbench qwen3moe-bf16-default W1,W2 --weight-dtype bf16
KVTIER_CUDA_MOE_SKINNY=0 kbench qwen3moe-bf16-s0 W1,W2 --weight-dtype bf16
tar czf $OUT/r3.tgz -C /tmp r
kbench qwen3moe-fp8-default W1,W2 --weight-dtype fp8 --kv-dtype fp8
KVTIER_CUDA_MOE_SKINNY=0 kbench qwen3moe-fp8-s0 W1,W2 --weight-dtype fp8 --kv-dtype fp8
tar czf $OUT/r3.tgz -C /tmp r
