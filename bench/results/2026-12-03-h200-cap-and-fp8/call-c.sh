#!/usr/bin/env bash
# Call C: the CUDA tests again (fast per-token quantization, W8A8 decode and prefill, the GPU
# memory account), the fp8 quality cost on the demo model, then scripts/run-bench.sh: the
# anchors, and in ONE kvtier bench process W1-W4 with the sampler-controls and JSON-schema
# variants, then the fp8 pass (W1, W2) and the fp8 + fp8 KV pass (W1-W4: the capped W3 and W4
# again, late in a long-lived process), GPU memory polled from outside every 0.25 s.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/c.txz -C /tmp/c
C=/tmp/c/c; R=/tmp/r; mkdir -p $R/tests
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok, $(grep -E '^\[  (FAILED|SKIPPED) ' $R/tests/$name.txt | tr '\n' ' ')"; }
t fp8 90 $C/bin/kvtier_cuda_fp8_test
t skinny 90 $C/bin/kvtier_cuda_skinny_test
t backend 150 $C/bin/kvtier_cuda_backend_test
t memory 120 $C/bin/kvtier_cuda_memory_test
grep -hE "W8A8|W8A16 relative|gpu memory cap: (an engine|first)|engine 29" $R/tests/*.txt | cut -c1-200
grep -hE "Failure" -A4 $R/tests/*.txt | head -30
timeout 60 $C/bin/kvtier_fp8_quality --model models/demo --text models/demo/heldout.txt --backend cuda \
  --json $R/fp8_quality_demo.json > $R/fp8_quality_demo.txt 2>&1; echo "[$(el) s] fp8 quality rc=$?"; tail -6 $R/fp8_quality_demo.txt
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 0.25; done ) > $R/poll.txt 2>&1 &
POLL=$!
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
WORKLOADS=W1,W2,W3,W4 F16_WORKLOADS=none FP8_WORKLOADS=W1,W2 FP8KV_WORKLOADS=W1,W2,W3,W4 TIME_LIMIT=60 MODEL_DIR=$M \
  BENCH_FLAGS="--sampler-controls --json-schema bench/grammar/w2_tool_calls.json --tokenizer $C/llama3/tokenizer.json" \
  timeout $(( 560 - $(el) )) bash $C/run-bench.sh $C $R/bench > $R/run-bench.log 2>&1
echo "[$(el) s] run-bench rc=$?"
kill $POLL
grep -E "^(W1|W2|W2s|W2j|W3|W4) " $R/run-bench.log | head -60
tar czf $OUT/c.tgz -C /tmp r
