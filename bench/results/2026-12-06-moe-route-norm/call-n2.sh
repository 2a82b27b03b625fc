#!/usr/bin/env bash
# Call N2 (issue #41, Qwen3-30B-A3B W1 at 0.60 of its limit in bf16): call N1 of
# ../2026-12-06-moe-down-combine/next/ (a = main, b/c/d its variants) plus e = b with the MLP's
# norm fused into the decode router. (1) the variants' kvtier_cuda_moe_test; (2) the W1/W2 graph
# steps of qwen3-30b-a3b in bf16 and fp8 (KVTIER_BENCH_QUICK), a..e then e..a; (3) ncu per kernel
# over one W1 step of the fastest bf16 build of round 1, after (4) kvtier_cuda_kernels_test and
# kvtier_cuda_fp8_test of 0e62d01. Carry n2: n1's plus e's two programs and the two tests.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=n2 . bench/results/device-call-prelude.sh
for v in e b c d; do t moe_test_$v 60 $C/bin/kvtier_cuda_moe_test_$v; done
tar czf $OUT/n2.tgz -C /tmp r
quick() {  # quick NAME VARIANT DTYPE
  KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$3 timeout 60 $C/bin/kvtier_cuda_bench_$2 qwen3-30b-a3b \
    > $R/quick-$1.txt 2>&1
  local rc=$?
  echo "[$(el) s] $1 rc=$rc $(grep -E "W1 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="a b c d e"; [ $round = 2 ] && order="e d c b a"
  for v in $order; do
    for d in bf16 fp8; do [ "$(left)" -gt 40 ] && quick $v-$d-$round $v $d; done
  done
  tar czf $OUT/n2.tgz -C /tmp r
done
# The committed tests not yet run on a GPU: the kernel tests' CPU references on every processor.
t kernels_test 120 $C/bin/kvtier_cuda_kernels_test
t fp8_test $(( $(left) > 200 ? $(left) - 130 : 60 )) $C/bin/kvtier_cuda_fp8_test
tar czf $OUT/n2.tgz -C /tmp r
best=$(for v in a b c d e; do echo "$(grep -E 'W1 decode.*graph' $R/quick-$v-bf16-1.txt | tr -s ' ' | cut -d' ' -f8) $v"; done \
  | sort -n | head -1 | cut -d' ' -f2)
[ "$(left)" -gt 60 ] && { KVTIER_BENCH_PROFILE=w1 timeout $(( $(left) - 10 )) ncu --clock-control none \
  --profile-from-start off --metrics gpu__time_duration.sum --csv $C/bin/kvtier_cuda_bench_$best qwen3-30b-a3b \
  > $R/ncu-qwen3moe-w1-$best.csv 2> $R/ncu-qwen3moe-w1-$best.err
  echo "[$(el) s] ncu $best"
  python3 bench/results/2026-12-06-step-profile/summarize-ncu.py $R/ncu-qwen3moe-w1-$best.csv 2>&1 | head -10; }
tar czf $OUT/n2.tgz -C /tmp r
