#!/usr/bin/env bash
# Call C1c, on C1's warm machine: run.sh again with the grouped run's device tier at 96 MiB and
# at 80 MiB (GROUPED_BYTES), to find how little a grouped 32k context runs in.
rm -rf /tmp/r; BUDGET=100 CARRY=c1 . bench/results/device-call-prelude.sh; unset KVTIER_CUDA_MODULE
N=$C/new; export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64
for b in 96MiB 80MiB; do
  GROUPED_BYTES=$b timeout 60 bash bench/results/2026-12-06-gpu-swa-32k/run.sh $N/bin/kvtier $R/swa-$b 2>&1 \
    | grep -E "exit|identical|blocks_freed|CAPACITY" | cut -c1-300
  rm -rf $R/swa-$b/model/*.safetensors
done
tar czf $OUT/c1c.tgz -C /tmp r
