#!/usr/bin/env bash
# Call N3 (issue #41): the kept combination f = main at 0e62d01's successor with N2's winners
# b (the chunked down+combine unpredicated) and d (the routing's integer top-k) applied on
# top of e's fused norm; its kvtier_cuda_moe_test, then Qwen3-30B-A3B W1/W2 graph steps of e
# (N2's fastest) and f in bf16 and fp8, e f then f e. Carry n3: bench e and f, moe test f.
rm -rf /tmp/r
BUDGET=${BUDGET:-200} CARRY=n3 . bench/results/device-call-prelude.sh
t moe_test_f 40 $C/bin/kvtier_cuda_moe_test_f
quick() {  # quick NAME VARIANT DTYPE
  KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$3 timeout 40 $C/bin/kvtier_cuda_bench_$2 qwen3-30b-a3b \
    > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W1 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="e f"; [ $round = 2 ] && order="f e"
  for v in $order; do
    for d in bf16 fp8; do [ "$(left)" -gt 20 ] && quick $v-$d-$round $v $d; done
  done
done
tar czf $OUT/n3.tgz -C /tmp r
