#!/usr/bin/env bash
# Call F: the bench plan of the GPU-cap issue, as a user runs it: scripts/run-bench.sh with
# WORKLOADS=W1,W2,W3,W4,W5,W6,W6c and BENCH_FLAGS="--sampler-controls --json-schema
# bench/grammar/w2_tool_calls.json --tokenizer <llama3 tokenizer>", the default passes (f16,
# fp8 and fp8 + fp8 KV of W1 and W2) with the capped W3 and W4 added to the fp8 + fp8 KV pass,
# so that they run again last in the long-lived process; W6c with its carried Redis server;
# GPU memory polled from outside every 0.25 s (nvidia-smi --query-compute-apps).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/f.txz -C /tmp/c
C=/tmp/c/f; R=/tmp/r; mkdir -p $R
cp scripts/run-bench.sh $C/run-bench.sh
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 0.25; done ) > $R/poll.txt 2>&1 &
POLL=$!
WORKLOADS=W1,W2,W3,W4,W5,W6,W6c FP8KV_WORKLOADS=W1,W2,W3,W4 TIME_LIMIT=60 TIER_TIME_LIMIT=90 MODEL_DIR=/tmp/kb/llama3-8b \
  BENCH_FLAGS="--sampler-controls --json-schema bench/grammar/w2_tool_calls.json --tokenizer $C/llama3/tokenizer.json" \
  timeout $(( 570 - $(el) )) bash $C/run-bench.sh $C $R/bench > $R/run-bench.log 2>&1
echo "[$(el) s] run-bench rc=$?"
kill $POLL
grep -E "^(W[0-9]|W2s|W2j|W6b|W6c) .*(peak|decode tok|output tok|TTFT|prefill)" $R/run-bench.log | cut -c1-120 | head -70
grep -E "missed|run-bench:" $R/run-bench.log | head
gzip $R/poll.txt
tar czf $OUT/f.tgz -C /tmp r
