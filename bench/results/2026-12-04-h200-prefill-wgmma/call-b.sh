#!/usr/bin/env bash
# Call B: the wgmma prefill attention in the whole model. The backend tests (every model path
# against the CPU backend, with the new kernel by default), then one kvtier bench process
# with the ceilings: W1, W4 and W6 in bf16 and fp8 weights + fp8 KV, and W8 in both, on the
# wgmma kernel; then W4 in both modes on the mma.sync kernel (KVTIER_CUDA_PREFILL_WGMMA=0) as
# the same-machine A/B of the prefill figure.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/b.txz -C /tmp/c
C=/tmp/c/b; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out /tmp/kb/llama3-8b > $R/mkmodel.txt 2>&1 ) &
MK=$!
timeout 150 $C/bin/kvtier_cuda_backend_test > $R/backend_test.txt 2>&1; rc=$?
echo "[$(el) s] backend test rc=$rc: $(grep -cE '^\[       OK \]' $R/backend_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/backend_test.txt | cut -c1-100 | tr '\n' ' ')"
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait $MK; echo "[$(el) s] ceilings + checkpoint"
M=/tmp/kb/llama3-8b
timeout $(( 420 - $(el) )) $C/bin/kvtier bench --workload W1,W4,W6 --model $M --ceilings $R/ceilings.txt \
  --json $R/bench.json --commit "$(cat $C/COMMIT)" --time-limit 60 --tier-dir /tmp/kb/tiers --tier-time-limit 60 \
  --pass "fp8-kv8:W1,W4,W6:weight=fp8:kv=fp8" --pass "long:W8" --pass "long-fp8:W8:weight=fp8:kv=fp8" \
  > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
KVTIER_CUDA_PREFILL_WGMMA=0 timeout $(( 560 - $(el) )) $C/bin/kvtier bench --workload W4 --model $M \
  --ceilings $R/ceilings.txt --json $R/bench-mma.json --commit "$(cat $C/COMMIT)" --time-limit 60 \
  --tier-dir /tmp/kb/tiers --tier-time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" > $R/bench-mma.txt 2>&1
echo "[$(el) s] bench mma rc=$?"
grep -E "^(W[0-9]|W6b) .*(prefill|TTFT|first)" $R/bench.txt $R/bench-mma.txt | cut -c1-150 | head -40
tar czf $OUT/b.tgz -C /tmp r
