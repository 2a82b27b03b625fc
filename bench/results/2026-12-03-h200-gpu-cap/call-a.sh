#!/usr/bin/env bash
# Call A: where the process's device memory grows (issue: GPU cap in a long-lived process).
# Binaries from .carry/a.txz (scripts/device-carry.sh); results into $OUT.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/a.txz -C /tmp/c
C=/tmp/c/a; R=$OUT
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
# cuBLASLt fp8 with outer-vector scales against bf16 on the prefill shapes, while the checkpoint is written.
timeout 150 $C/bin/fp8_lt_gemm > $R/fp8_lt_gemm.txt 2>&1; echo "[$(el) s] fp8_lt_gemm rc=$?"
tail -12 $R/fp8_lt_gemm.txt
# The memory test (30 engines, NVML after every step).
[ -x $C/bin/kvtier_cuda_memory_test ] && { timeout 200 $C/bin/kvtier_cuda_memory_test > $R/memory_test.txt 2>&1; echo "[$(el) s] memory test rc=$?"; grep -E "gpu memory cap|OK \]|FAILED|Failure|process holds" $R/memory_test.txt | head -45; }
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
# The bench plan that crossed the cap, one process, debug log of the backend's memory stages,
# nvidia-smi polled from outside every 0.25 s.
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 0.25; done ) > $R/poll.txt 2>&1 &
POLL=$!
KVTIER_LOG=debug timeout 330 $C/bin/kvtier bench --workload W1,W2,W3,W4 --model $M --json $R/bench.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 --sampler-controls --json-schema bench/grammar/w2_tool_calls.json \
  --tokenizer $C/llama3/tokenizer.json > $R/bench.txt 2> $R/bench-log.txt
echo "[$(el) s] bench rc=$?"
kill $POLL
grep "gpu memory" $R/bench-log.txt | cut -c1-330 > $R/gpu-memory-stages.txt
cat $R/gpu-memory-stages.txt | cut -c1-260 | head -60
grep -E "^W[0-9]" $R/bench.txt | grep -iE "peak|decode tok|prefill" | head -20
gzip -f $R/bench-log.txt
