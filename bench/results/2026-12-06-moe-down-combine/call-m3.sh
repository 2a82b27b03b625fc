#!/usr/bin/env bash
# Call M3 (issue #41, the MoE decode path at one row): M2's register chunks left bf16 Qwen3's
# down+combine at 18 us in two waves of CTAs and cost Mixtral's long rows their pipeline. Now
# short expert rows are copied to shared memory by the copy engine (one bulk copy per warp of
# its C adjacent rows, requested before the PDL wait: a wave of CTAs holds the layer's bytes in
# flight), long rows stream through registers as the per-route GEMV does; the router loads all
# of a lane's pieces (hidden 2048) before the PDL wait, and its top-k takes the warp's best with
# two integer reductions instead of a butterfly of shuffles.
# Carry m3: scripts/device-carry.sh .carry/m3 <kvtier_cuda_bench, kvtier_cuda_moe_bench,
#   kvtier_cuda_moe_test, libkvtier_cuda.so>; the _old programs from bb69fae's build; anchors;
#   COMMIT; strip; tar | xz --x86.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=m3 . bench/results/device-call-prelude.sh
t moe_test 120 $C/bin/kvtier_cuda_moe_test
tar czf $OUT/m3.tgz -C /tmp r
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
  tar czf $OUT/m3.tgz -C /tmp r
done
[ "$(left)" -gt 120 ] && { KVTIER_BENCH_PROFILE=w1 timeout 100 ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum --csv $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/ncu-qwen3moe-w1.csv 2> $R/ncu-qwen3moe-w1.err
  echo "[$(el) s] ncu qwen3moe rc=$?"
  python3 bench/results/2026-12-06-step-profile/summarize-ncu.py $R/ncu-qwen3moe-w1.csv 2>&1 | head -12; }
tar czf $OUT/m3.tgz -C /tmp r
for v in new old; do
  [ "$(left)" -lt 60 ] && break
  b=kvtier_cuda_bench; [ $v = old ] && b=${b}_old
  quick mixtral-fp8-$v $b fp8 mixtral-8x7b
done
tar czf $OUT/m3.tgz -C /tmp r
