#!/usr/bin/env bash
# Call M2 (issue #41, the MoE decode path at one row): M1's one warp per (column, route) left
# bf16 Qwen3's down+combine at 24 us (a chain of dependent round trips per CTA for 12 KB); now
# one warp per (route, C adjacent columns), 16 pieces in flight per lane, the route weights
# loaded before the PDL wait; the router's loads batched as in M1. (1) kvtier_cuda_moe_test: bit for bit against the grouped path;
# (2) kvtier_cuda_moe_bench qwen3/mixtral, main before (_old, bb69fae) and after; (3) the
# Qwen3-30B-A3B graph steps (KVTIER_BENCH_QUICK, bf16 and fp8 weights generated on the device),
# old and new alternating; (4) the new W1 step kernel by kernel (ncu, clocks left alone).
# Carry m2: scripts/device-carry.sh .carry/m2 <kvtier_cuda_bench, kvtier_cuda_moe_bench,
#   kvtier_cuda_moe_test, libkvtier_cuda.so>; the _old programs from bb69fae's build; anchors;
#   COMMIT; strip; tar | xz --x86.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=m2 . bench/results/device-call-prelude.sh
t moe_test 120 $C/bin/kvtier_cuda_moe_test
tar czf $OUT/m2.tgz -C /tmp r
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
  tar czf $OUT/m2.tgz -C /tmp r
done
[ "$(left)" -gt 120 ] && { KVTIER_BENCH_PROFILE=w1 timeout 100 ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum --csv $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/ncu-qwen3moe-w1.csv 2> $R/ncu-qwen3moe-w1.err
  echo "[$(el) s] ncu qwen3moe rc=$?"
  python3 bench/results/2026-12-06-step-profile/summarize-ncu.py $R/ncu-qwen3moe-w1.csv 2>&1 | head -12; }
tar czf $OUT/m2.tgz -C /tmp r
for v in new; do
  [ "$(left)" -lt 60 ] && break
  b=kvtier_cuda_bench; [ $v = old ] && b=${b}_old
  quick mixtral-fp8-$v $b fp8 mixtral-8x7b
done
tar czf $OUT/m2.tgz -C /tmp r
