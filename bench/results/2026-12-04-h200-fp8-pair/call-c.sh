#!/usr/bin/env bash
# Call C: the decode attention's split heuristic plans for the resident CTAs the runtime
# reports for the instance that runs (2 per SM for bf16 and the fp8 pair tiles on sm_90,
# where it assumed 3). The CUDA tests it touches, the decode attention sweep (the heuristic's
# choice printed beside every split count), then kvtier bench with the ceilings: W1, W2 and W4
# in bf16, then in fp8 weights + fp8 KV (W4's decode at 32k positions is one row split over
# the whole GPU).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/c.txz -C /tmp/c
C=/tmp/c/c; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
M=/tmp/kb/llama3-8b
( [ -e $M.ready ] || { $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready; } ) &
timeout 30 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings rc=$?"
for t in decode fp8 backend plan memory; do
  timeout 150 $C/bin/kvtier_cuda_${t}_test > $R/${t}_test.txt 2>&1; rc=$?
  echo "[$(el) s] $t test rc=$rc: $(grep -cE '^\[       OK \]' $R/${t}_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/${t}_test.txt | cut -c1-100 | tr '\n' ' ')"
done
KVTIER_DECODE_BENCH=1 timeout 100 $C/bin/kvtier_cuda_bench > $R/decode_attention.txt 2>&1
echo "[$(el) s] decode attention rc=$?"; grep -E "max_splits=[0-9]+ \|" $R/decode_attention.txt | cut -c1-150
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout $(( 570 - $(el) )) $C/bin/kvtier bench --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 60 --tier-dir /tmp/kb/tiers --workload W1,W2,W4 \
  --pass "fp8-kv8:W1,W2,W4:weight=fp8:kv=fp8" > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W[0-9]+ .*(prefill|decode tok)" $R/bench.txt | cut -c1-160
tar czf $OUT/c.tgz -C /tmp r
