#!/usr/bin/env bash
# Call C: the landed wgmma prefill attention. Its tests (every variant against the host
# reference, bf16 and fp8 KV) and the timing sweep of every variant against the mma.sync
# kernel, the backend tests (every model path against the CPU backend), then one kvtier bench
# process with the ceilings: W1, W2, W4 and W6 in bf16 and fp8 weights + fp8 KV, W8 in both;
# then W4 in both modes on the mma.sync kernel (KVTIER_CUDA_PREFILL_WGMMA=0), the same-machine
# A/B of the prefill figure.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/c.txz -C /tmp/c
C=/tmp/c/c; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out /tmp/kb/llama3-8b > $R/mkmodel.txt 2>&1 ) &
MK=$!
for t in prefill backend; do
  timeout 120 $C/bin/kvtier_cuda_${t}_test > $R/${t}_test.txt 2>&1; rc=$?
  echo "[$(el) s] $t test rc=$rc: $(grep -cE '^\[       OK \]' $R/${t}_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/${t}_test.txt | cut -c1-100 | tr '\n' ' ')"
done
timeout 60 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*Prefill*' > $R/fp8_prefill_test.txt 2>&1
echo "[$(el) s] fp8 prefill test rc=$?: $(tail -1 $R/fp8_prefill_test.txt)"
grep -E "prefill-attention" $R/prefill_test.txt | grep -E "kv128 x2|mma " | cut -c20-150
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait $MK; echo "[$(el) s] ceilings + checkpoint"
M=/tmp/kb/llama3-8b
timeout $(( 470 - $(el) )) $C/bin/kvtier bench --workload W1,W2,W4,W6 --model $M --ceilings $R/ceilings.txt \
  --json $R/bench.json --commit "$(cat $C/COMMIT)" --time-limit 60 --tier-dir /tmp/kb/tiers --tier-time-limit 60 \
  --pass "fp8-kv8:W1,W2,W4,W6:weight=fp8:kv=fp8" --pass "long:W8" --pass "long-fp8:W8:weight=fp8:kv=fp8" \
  > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
KVTIER_CUDA_PREFILL_WGMMA=0 timeout $(( 570 - $(el) )) $C/bin/kvtier bench --workload W4 --model $M \
  --ceilings $R/ceilings.txt --json $R/bench-mma.json --commit "$(cat $C/COMMIT)" --time-limit 60 \
  --tier-dir /tmp/kb/tiers --tier-time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" > $R/bench-mma.txt 2>&1
echo "[$(el) s] bench mma rc=$?"
grep -E "^(W[0-9]) .*(prefill|TTFT|decode tok)" $R/bench.txt $R/bench-mma.txt | cut -c1-150 | head -40
tar czf $OUT/c.tgz -C /tmp r
