#!/usr/bin/env bash
# Call P2 (prepared for the next session; issue #41's Qwen3-30B-A3B W1 at 0.60 of its limit):
# why the MoE decode path's down+combine kernel streams its 25 MB at 0.37 of the HBM ceiling
# and the router takes 12.7 µs for half a megabyte (../2026-12-06-fp8-rows/c3/
# per-kernel-qwen3moe-w1.txt). ncu's full sections (memory workload, occupancy, warp stall
# reasons, launch statistics) on one launch each of DownCombineKernel, DecodeRouteKernel and,
# for comparison, ExpertGemvKernel, inside one W1 graph step of kvtier_cuda_bench
# (KVTIER_BENCH_PROFILE=w1, bf16 weights generated on the device); then the one-layer MLP
# sweep of kvtier_cuda_moe_bench qwen3; then kvtier_cuda_fp8_test alone, its 40 cases with
# the time they need (C3-C5 cut its KV attention cases short).
# Carry p2: scripts/device-carry.sh .carry/p2 <kvtier_cuda_bench, kvtier_cuda_moe_bench,
#   kvtier_cuda_fp8_test>; ../shared/anchors; COMMIT; strip; tar | xz --x86.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=p2 . bench/results/device-call-prelude.sh
for k in DownCombineKernel DecodeRouteKernel ExpertGemvKernel; do
  KVTIER_BENCH_PROFILE=w1 timeout 120 ncu --clock-control none --profile-from-start off --set full \
    -k regex:$k --launch-count 1 $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/ncu-full-$k.txt 2>&1
  echo "[$(el) s] ncu $k rc=$?"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Stall" \
    $R/ncu-full-$k.txt | head -14
  tar czf $OUT/p2.tgz -C /tmp r
done
timeout 150 $C/bin/kvtier_cuda_moe_bench qwen3 > $R/moe_bench_qwen3.txt 2>&1; echo "[$(el) s] moe_bench rc=$?"
grep -E "^HBM|rows +[12] " $R/moe_bench_qwen3.txt | cut -c1-150
t fp8_test 240 $C/bin/kvtier_cuda_fp8_test
tar czf $OUT/p2.tgz -C /tmp r
