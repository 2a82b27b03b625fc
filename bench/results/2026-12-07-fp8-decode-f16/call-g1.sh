#!/usr/bin/env bash
# Call G1 (issues #40, #34): fp8 KV decode attention with its products in f16
# (cuda_decode_fp8_pair_tiles 2: one e4m3x2 -> f16x2 conversion per code pair) against the
# pair tiles in bf16 (1, the default) and the 16-position tiles (0).
#  1. kvtier_cuda_fp8_test's decode tests: every form against the CPU on the same bytes
#     (tiny and large queries, poisoned rows past the context, every split count).
#  2. W2, fp8 weights + fp8 KV (`kvtier bench`, each in its own process): forms 1, 2, 2, 1.
#  3. Where the carry has kvtier_cuda_bench: the decode attention alone (KVTIER_DECODE_BENCH=1;
#     W1, W2, W4 and W9 shapes, forms 0, 1 and 2, a sweep of splits), and W9's decode step at
#     512 rows (KVTIER_BENCH_W9=512:1500), forms 1 and 2.
# Carry g1: bash bench/results/2026-12-07-fp8-decode-f16/build-g1.sh (or a carry with the same
# programs; CARRY names it). Sourced after another call script, it reuses $M and the ceilings.
BUDGET=${BUDGET:-230} CARRY=${CARRY:-g1} . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
[ -f $M/config.json ] || $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
t fp8decode 80 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*KvFp8AttentionTest.*Decode*'
wait; [ -s $R/ceilings.txt ] || timeout 60 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
tar czf $OUT/g1.tgz -C /tmp r
for m in 1 2 2 1; do
  KVTIER_CUDA_DECODE_FP8_PAIR=$m kbench w2-fp8-pair$m-$(el) W2 --weight-dtype fp8 --kv-dtype fp8
done
tar czf $OUT/g1.tgz -C /tmp r
[ -x $C/bin/kvtier_cuda_bench ] || exit 0
KVTIER_DECODE_BENCH=1 timeout 90 $C/bin/kvtier_cuda_bench > $R/decode_attention.txt 2>&1
echo "[$(el) s] decode attention rc=$?"
grep -E "fp8" $R/decode_attention.txt | sed -E 's/KV=[0-9.]+MB //; s/\(heuristic [0-9]+\)//' | cut -c15-200
tar czf $OUT/g1.tgz -C /tmp r
for m in 1 2; do
  [ "$(left)" -lt 40 ] && { echo "skip w9 $m: out of time"; continue; }
  KVTIER_BENCH_W9=512:1500 KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8 KVTIER_CUDA_DECODE_FP8_PAIR=$m \
    timeout $(( $(left) - 5 )) $C/bin/kvtier_cuda_bench llama3-8b > $R/w9-steps-pair$m.txt 2>&1
  echo "[$(el) s] w9 steps pair $m: $(grep -E 'decode, 512' $R/w9-steps-pair$m.txt)"
done
tar czf $OUT/g1.tgz -C /tmp r
