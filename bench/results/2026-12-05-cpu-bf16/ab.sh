#!/bin/bash
# Interleaved A/B of the BF16 kernels: cpu_speed with --kernels fast (vdpbf16ps) and exact
# (the reference's order), alternating, N alternations; prints each JSON line.
# usage: [ROUNDS=R] ab.sh MODEL N PREFILL_THREADS DECODE_TOKENS [cpu_speed binary]
model=$1 n=$2 threads=$3 decode=$4 bin=${5:-build/tools/cpu_speed/cpu_speed}
for ((i = 0; i < n; ++i)); do
  for k in fast exact; do
    "$bin" "$model" --kernels "$k" --prefill 512 --prefill-threads "$threads" --decode "$decode" --decode-threads 1 --rounds "${ROUNDS:-3}"
  done
done
