#!/usr/bin/env bash
# Call D: the CUDA tests after their fixes (fp8 accumulation bounds, W8A8 with bf16 compute
# only, the buffers of two backends compared without their runtime shares), then one bench
# process running W4 and the two W8 passes (bf16 weights + KV streamed from the host; fp8
# weights + fp8 KV, W8A8 prefill), GPU memory polled from outside every 0.25 s.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/d.txz -C /tmp/c
C=/tmp/c/d; R=/tmp/r; mkdir -p $R/tests
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok, $(grep -E '^\[  (FAILED|SKIPPED) ' $R/tests/$name.txt | cut -c1-120 | tr '\n' ' ')"; }
t fp8 90 $C/bin/kvtier_cuda_fp8_test
t skinny 90 $C/bin/kvtier_cuda_skinny_test
t backend 150 $C/bin/kvtier_cuda_backend_test
t memory 120 $C/bin/kvtier_cuda_memory_test
grep -hE "W8A8|gpu memory cap: (an engine|first)|engine 29" $R/tests/*.txt | cut -c1-160
grep -hE "Failure" -A6 $R/tests/*.txt | head -30
timeout 20 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings rc=$?"
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 0.25; done ) > $R/poll.txt 2>&1 &
POLL=$!
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout $(( 570 - $(el) )) $C/bin/kvtier bench --workload W4 --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 150 --tier-time-limit 150 \
  --pass long:W8 --pass long-fp8:W8:weight=fp8:kv=fp8 > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
kill $POLL
grep -E "^(W4|W8) " $R/bench.txt | head -30
tar czf $OUT/d.tgz -C /tmp r
