#!/usr/bin/env bash
# The quality cost of fp8 on a random Llama-3-8B-shaped checkpoint (issue 34's "random 8B"):
# kvtier_fp8_quality on the CUDA backend, bf16 reference against fp8 weights, fp8 KV and both,
# over 1,023 scored positions of the demo model's held-out text (byte tokenizer).
set -u
mkdir -p /tmp/c && tar xJf .carry/q.txz -C /tmp/c
C=/tmp/c/q; R=$OUT/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64
$C/bin/kvtier mkmodel --preset llama3-8b --tokenizer bytes --out /tmp/m8 > $R/mkmodel.txt 2>&1
tail -1 $R/mkmodel.txt
timeout 400 $C/bin/kvtier_fp8_quality --model /tmp/m8 --text models/demo/heldout.txt --backend cuda \
  --window 1024 --max-positions 1023 --json $R/fp8_quality_8b.json > $R/fp8_quality_8b.txt 2>&1
echo "rc=$?"; tail -12 $R/fp8_quality_8b.txt
