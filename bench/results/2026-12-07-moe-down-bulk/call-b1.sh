#!/usr/bin/env bash
# Call B1 (issue #41, Qwen3-30B-A3B W1 decode at 0.63 of its limit): two kernels that read
# their weights through the copy engine instead of registers, each against its register form
# in the same binary: the decode path's down+combine (DownCombineBulkKernel,
# KVTIER_CUDA_MOE_DOWN_BULK) and the decode GEMV where the whole matrix fits in shared memory
# (gemv_bulk.cuh, KVTIER_CUDA_GEMV_BULK; Qwen3-MoE's qkv and o).
# (1) tests: the MoE decode path's bits, the GEMV's bits and references (16-bit and fp8), the
# MoE backend presets against the CPU backend; (2) kvtier_cuda_moe_bench qwen3: one MLP as a
# graph, gemv-fused (bulk) against fused-regs; (3) W1/W2 graph steps of qwen3-30b-a3b in bf16
# and fp8 (KVTIER_BENCH_QUICK), variants gG = gemv bulk g, down bulk G, in one order then the
# reverse; (4) ncu per kernel over one W1 bf16 step of the default.
# Carry b1: scripts/pack-carry.sh b1 build/tests/backend_cuda/kvtier_cuda_{moe_test,moe_bench,bench,
#   backend_test,kernels_test,fp8_test} build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-480} CARRY=b1 . bench/results/device-call-prelude.sh; link_source_dir
t moe_test 90 $C/bin/kvtier_cuda_moe_test
t gemv_test 60 $C/bin/kvtier_cuda_kernels_test --gtest_filter='*Gemv*'
t fp8_gemv_test 60 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*Gemv*'
t backend_moe 120 $C/bin/kvtier_cuda_backend_test --gtest_filter='*qwen3moe*:*mixtral*'
timeout 120 $C/bin/kvtier_cuda_moe_bench qwen3 > $R/moe_bench_qwen3.txt 2>&1
echo "[$(el) s] moe_bench rc=$?"; grep -E "rows +[12] tile (gemv|gemv-fused|fused-regs) " $R/moe_bench_qwen3.txt | cut -c1-140
tar czf $OUT/b1.tgz -C /tmp r
quick() {  # quick NAME GEMV_BULK DOWN_BULK DTYPE
  KVTIER_CUDA_GEMV_BULK=$2 KVTIER_CUDA_MOE_DOWN_BULK=$3 KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$4 timeout 60 \
    $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/quick-$1.txt 2>&1
  local rc=$?
  echo "[$(el) s] $1 rc=$rc $(grep -E "W1 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="11 01 00"; [ $round = 2 ] && order="00 01 11"
  for v in $order; do
    for d in bf16 fp8; do [ "$(left)" -gt 40 ] && quick v$v-$d-$round ${v:0:1} ${v:1:1} $d; done
  done
  tar czf $OUT/b1.tgz -C /tmp r
done
[ "$(left)" -gt 60 ] && { KVTIER_BENCH_PROFILE=w1 timeout $(( $(left) - 10 )) ncu --clock-control none \
  --profile-from-start off --metrics gpu__time_duration.sum --csv $C/bin/kvtier_cuda_bench qwen3-30b-a3b \
  > $R/ncu-qwen3moe-w1.csv 2> $R/ncu-qwen3moe-w1.err
  echo "[$(el) s] ncu"
  python3 bench/results/2026-12-06-step-profile/summarize-ncu.py --by-grid $R/ncu-qwen3moe-w1.csv 2>&1 | head -14; }
tar czf $OUT/b1.tgz -C /tmp r
