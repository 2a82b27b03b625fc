#!/usr/bin/env bash
# Call M1 (issue #41, the MoE decode path at one row): the down+combine kernel rebuilt as one
# warp per (column, route) (64 registers instead of 255 with local-memory spills, 4 CTAs per SM
# instead of 1) and the router's loads batched (8 pieces of every lane in flight instead of one
# dependent round trip each). (1) kvtier_cuda_moe_test: bit for bit against the grouped path;
# (2) kvtier_cuda_moe_bench qwen3/mixtral, main before (_old, bb69fae) and after; (3) the
# Qwen3-30B-A3B graph steps (KVTIER_BENCH_QUICK, bf16 and fp8 weights generated on the device),
# old and new alternating; (4) the new W1 step kernel by kernel (ncu, clocks left alone).
# Carry m1: scripts/device-carry.sh .carry/m1 <kvtier_cuda_bench, kvtier_cuda_moe_bench,
#   kvtier_cuda_moe_test, libkvtier_cuda.so>; the _old programs from bb69fae's build; anchors;
#   COMMIT; strip; tar | xz --x86.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=m1 . bench/results/device-call-prelude.sh
t moe_test 120 $C/bin/kvtier_cuda_moe_test
tar czf $OUT/m1.tgz -C /tmp r
for v in old new; do
  b=kvtier_cuda_moe_bench; [ $v = old ] && b=${b}_old
  timeout 60 $C/bin/$b qwen3 > $R/moe_bench_qwen3-$v.txt 2>&1; echo "[$(el) s] moe_bench qwen3 $v rc=$?"
  grep -E "rows +[12] tile (auto|gemv-fused)" $R/moe_bench_qwen3-$v.txt | cut -c1-130
done
quick() {  # quick NAME BINARY DTYPE PRESET
  KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$3 timeout 90 $C/bin/$2 $4 > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W1 decode.*graph|W2 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-90 | tr '\n' ' ')"
}
for round in 1 2; do
  for d in bf16 fp8; do
    if [ $round = 1 ]; then quick old-$d-1 kvtier_cuda_bench_old $d qwen3-30b-a3b; quick new-$d-1 kvtier_cuda_bench $d qwen3-30b-a3b
    else quick new-$d-2 kvtier_cuda_bench $d qwen3-30b-a3b; quick old-$d-2 kvtier_cuda_bench_old $d qwen3-30b-a3b; fi
  done
  tar czf $OUT/m1.tgz -C /tmp r
done
[ "$(left)" -gt 120 ] && { KVTIER_BENCH_PROFILE=w1 timeout 100 ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum --csv $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/ncu-qwen3moe-w1.csv 2> $R/ncu-qwen3moe-w1.err
  echo "[$(el) s] ncu qwen3moe rc=$?"
  python3 bench/results/2026-12-06-step-profile/summarize-ncu.py $R/ncu-qwen3moe-w1.csv 2>&1 | head -12; }
tar czf $OUT/m1.tgz -C /tmp r
for v in new old; do
  [ "$(left)" -lt 100 ] && break
  b=kvtier_cuda_bench; [ $v = old ] && b=${b}_old
  quick mixtral-fp8-$v $b fp8 mixtral-8x7b
done
tar czf $OUT/m1.tgz -C /tmp r
