#!/usr/bin/env bash
# Call A: the split prefill attention variant (7: a CTA per warpgroup, two per SM) and the fp8
# GEMM ceiling. The prefill kernel's tests (every variant against the host reference, bf16
# and fp8 KV) and its timing sweep; the anchors (ceilings.py, lib_kernels.py: cuBLASLt fp8 and
# cuDNN attention on the same shapes); one kvtier bench process with both anchors' files: W1,
# W2, W4 in bf16, then fp8 weights + fp8 KV (limits of the fp8 pass from the fp8 GEMM
# ceiling); then W4 in both modes with variant 7 (KVTIER_CUDA_PREFILL_VARIANT=7), the A/B.
CARRY=a . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 ) &
MK=$!
timeout 150 $C/bin/kvtier_cuda_prefill_test > $R/prefill_test.txt 2>&1
echo "[$(el) s] prefill test rc=$?: $(grep -cE '^\[       OK \]' $R/prefill_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/prefill_test.txt | cut -c1-100 | tr '\n' ' ')"
grep -E "prefill-attention" $R/prefill_test.txt | grep -E "kv128 x2|split|mma " | cut -c20-150
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings rc=$?"
timeout 150 python3 $C/anchors/lib_kernels.py > $R/lib_kernels.txt 2>&1
echo "[$(el) s] lib_kernels rc=$?"; grep -E "attn_T|M\": (2048|4096)," $R/lib_kernels.txt | cut -c1-160
wait $MK; echo "[$(el) s] checkpoint"
timeout $(( 470 - $(el) )) $C/bin/kvtier bench --workload W1,W2,W4 --model $M --ceilings $R/ceilings.txt \
  --lib-kernels $R/lib_kernels.txt --json $R/bench.json --commit "$(cat $C/COMMIT)" --time-limit 60 \
  --pass "fp8-kv8:W1,W2,W4:weight=fp8:kv=fp8" > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
KVTIER_CUDA_PREFILL_VARIANT=7 timeout $(( 575 - $(el) )) $C/bin/kvtier bench --workload W4 --model $M \
  --ceilings $R/ceilings.txt --lib-kernels $R/lib_kernels.txt --json $R/bench-split.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" > $R/bench-split.txt 2>&1
echo "[$(el) s] bench split rc=$?"
grep -E "^(W[0-9]) " $R/bench.txt $R/bench-split.txt | cut -c1-170 | head -40
tar czf $OUT/a.tgz -C /tmp r
