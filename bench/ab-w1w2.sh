#!/usr/bin/env bash
# A/B: W1,W2 through `kvtier bench` with the old (3f28377) and new builds, alternating.
C=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
model=/tmp/kvtier-bench/llama3-8b
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64
[ -f $model/config.json ] || $C/bin/kvtier mkmodel --preset llama3-8b --out $model > /dev/null 2>&1
for round in 1 2; do
  for which in old new; do
    if [ $which = old ]; then bin=$C/old/kvtier; mod=$C/old/libkvtier_cuda.so; else bin=$C/bin/kvtier; mod=$C/lib/libkvtier_cuda.so; fi
    KVTIER_CUDA_MODULE=$mod $bin bench --workload W1,W2 --model $model --json $out/ab-$which-$round.json --time-limit 40 2>&1 | grep -E "^W[12] +decode"| sed "s/^/$which $round: /"
  done
done
KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so $C/bin/kvtier_cuda_bench 2>&1 | grep -E "decode|prefill 512"
