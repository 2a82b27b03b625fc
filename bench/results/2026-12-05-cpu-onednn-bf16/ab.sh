#!/bin/bash
# Interleaved A/B of the BF16 prefill: cpu_speed built without oneDNN (-DKVTIER_ONEDNN=OFF:
# the vdpbf16ps kernel everywhere, main's behaviour) and with it (the default), alternating,
# N alternations; prints `uptime` before each pair and each run's JSON line.
# usage: [ROUNDS=R] ab.sh MODEL N PREFILL_THREADS DECODE_TOKENS BEFORE_BINARY AFTER_BINARY
model=$1 n=$2 threads=$3 decode=$4 before=$5 after=$6
for ((i = 0; i < n; ++i)); do
  uptime
  for bin in "$before" "$after"; do
    echo -n "$(basename "$bin") "
    "$bin" "$model" --prefill 512 --prefill-threads "$threads" --decode "$decode" --decode-threads 1 --rounds "${ROUNDS:-3}"
  done
done
uptime
