#!/usr/bin/env bash
# Call G1 (issues #40, #34): fp8 KV decode attention with its products in f16
# (cuda_decode_fp8_pair_tiles 2: one e4m3x2 -> f16x2 conversion per code pair) against the
# pair tiles in bf16 (1, the default) and the 16-position tiles (0).
#  1. kvtier_cuda_fp8_test's decode tests: every form against the CPU on the same bytes
#     (tiny and large queries, poisoned rows past the context, every split count).
#  2. The decode attention alone (KVTIER_DECODE_BENCH=1 kvtier_cuda_bench): W1, W2, W4 and W9
#     shapes in fp8 KV, forms 0, 1 and 2, a sweep of splits.
#  3. Whole graph steps, random Llama-3-8B, fp8 weights + fp8 KV: W2 (64 rows) and W9's decode
#     at 512 rows, forms 1 and 2, then 2 and 1.
# Carry g1: bash bench/results/2026-12-07-fp8-decode-f16/build-g1.sh
BUDGET=${BUDGET:-230} CARRY=${CARRY:-g1} . bench/results/device-call-prelude.sh
t fp8decode 80 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*KvFp8AttentionTest.*Decode*'
tar czf $OUT/g1.tgz -C /tmp r
KVTIER_DECODE_BENCH=1 timeout 90 $C/bin/kvtier_cuda_bench > $R/decode_attention.txt 2>&1
echo "[$(el) s] decode attention rc=$?"
grep -E "fp8" $R/decode_attention.txt | sed -E 's/KV=[0-9.]+MB //; s/\(heuristic [0-9]+\)//' | cut -c15-200
tar czf $OUT/g1.tgz -C /tmp r
for m in 1 2 2 1; do
  quick_step w2-pair$m-$(el) $C/bin/kvtier_cuda_bench llama3-8b KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8 \
    KVTIER_CUDA_DECODE_FP8_PAIR=$m
done
for m in 1 2; do
  [ "$(left)" -lt 40 ] && { echo "skip w9 $m: out of time"; continue; }
  KVTIER_BENCH_W9=512:1500 KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8 KVTIER_CUDA_DECODE_FP8_PAIR=$m \
    timeout $(( $(left) - 5 )) $C/bin/kvtier_cuda_bench llama3-8b > $R/w9-steps-pair$m.txt 2>&1
  echo "[$(el) s] w9 steps pair $m: $(grep -E 'decode, 512' $R/w9-steps-pair$m.txt)"
done
tar czf $OUT/g1.tgz -C /tmp r
