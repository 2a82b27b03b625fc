#!/usr/bin/env bash
# Call M4 (issue #41): the kept design. Short expert rows as M2 (register chunks, C = 8/4/2
# columns per warp), long rows as M1 (gemv::Stream, one column per warp), the route weights
# loaded before the PDL wait; the router as M1/M2 (its loads batched; M3's 16 pieces ahead and
# integer-reduction top-k were slower and are not kept). (1) kvtier_cuda_moe_test; (2) Qwen3-
# 30B-A3B graph steps old/new in bf16 and fp8 (KVTIER_BENCH_QUICK), Mixtral fp8 new; (3) Mixtral
# 8x7B fp8 weights + fp8 KV end to end: W1 through `kvtier bench` with this call's ceilings.
# Carry m4: scripts/device-carry.sh .carry/m4 <kvtier, libkvtier_cuda.so, kvtier_cuda_bench,
#   kvtier_cuda_moe_test>; kvtier_cuda_bench_old from bb69fae's build; anchors; COMMIT; strip;
#   tar | xz --x86.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=m4 . bench/results/device-call-prelude.sh
X=/tmp/kb/mixtral-8x7b-fp8
mkdir -p /tmp/kb
$C/bin/kvtier mkmodel --preset mixtral-8x7b --fp8 ct-channel --out $X > $R/mkmodel-mixtral.txt 2>&1 &
mk=$!
t moe_test 120 $C/bin/kvtier_cuda_moe_test
tar czf $OUT/m4.tgz -C /tmp r
quick() {  # quick NAME BINARY DTYPE PRESET
  KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$3 timeout 90 $C/bin/$2 $4 > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W1 decode.*graph|W2 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-90 | tr '\n' ' ')"
}
for d in bf16 fp8; do
  quick old-$d kvtier_cuda_bench_old $d qwen3-30b-a3b; quick new-$d kvtier_cuda_bench $d qwen3-30b-a3b
done
tar czf $OUT/m4.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-mixtral.txt | cut -c1-100)"
quick mixtral-fp8-new kvtier_cuda_bench fp8 mixtral-8x7b
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(head -c 100 $R/ceilings.txt)"
[ "$(left)" -gt 60 ] && { timeout $(( $(left) - 8 )) $C/bin/kvtier bench --workload W1 --model $X --weight-dtype fp8 \
  --kv-dtype fp8 --ceilings $R/ceilings.txt --json $R/mixtral-fp8-W1.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 > $R/mixtral-fp8-W1.txt 2>&1
  echo "[$(el) s] mixtral W1 rc=$?"; grep -E "^W1 " $R/mixtral-fp8-W1.txt | cut -c1-150; }
tar czf $OUT/m4.tgz -C /tmp r
