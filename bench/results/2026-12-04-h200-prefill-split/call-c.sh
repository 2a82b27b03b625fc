#!/usr/bin/env bash
# Call C: prefill attention variant 7 (64-position tiles, two stages, 128 registers a thread:
# two CTAs per SM). The prefill kernel's tests and timing sweep, then W4 (32k) and W8 (128k,
# the long-context passes) in bf16 and fp8 weights + fp8 KV, with the default kernel and
# with variant 7 (KVTIER_CUDA_PREFILL_VARIANT=7), each in one process, ceilings in the call.
CARRY=c . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 ) &
MK=$!
timeout 150 $C/bin/kvtier_cuda_prefill_test > $R/prefill_test.txt 2>&1
echo "[$(el) s] prefill test rc=$?: $(grep -cE '^\[       OK \]' $R/prefill_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/prefill_test.txt | cut -c1-100 | tr '\n' ' ')"
grep -E "prefill-attention" $R/prefill_test.txt | grep -E "kv128 x2|2/SM" | cut -c20-130
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
timeout 150 python3 $C/anchors/lib_kernels.py > $R/lib_kernels.txt 2>&1
wait $MK; echo "[$(el) s] anchors + checkpoint"
for v in 0 7; do
  KVTIER_CUDA_PREFILL_VARIANT=$v timeout $(( 285 + 285 * (v / 7) - $(el) )) $C/bin/kvtier bench --workload W4 --model $M \
    --ceilings $R/ceilings.txt --lib-kernels $R/lib_kernels.txt --json $R/bench-v$v.json --commit "$(cat $C/COMMIT)" \
    --time-limit 60 --tier-dir /tmp/kb/tiers --tier-time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" --pass "long:W8" --pass "long-fp8:W8:weight=fp8:kv=fp8" \
    > $R/bench-v$v.txt 2>&1
  echo "[$(el) s] bench variant $v rc=$?"
done
grep -E "^W[48] .*(prefill|decode)" $R/bench-v0.txt $R/bench-v7.txt | cut -c1-150
tar czf $OUT/c.tgz -C /tmp r
