#!/usr/bin/env bash
# Call C1: (1) the sliding-window layer groups at 32k on the GPU (run.sh, issue #41);
# (2) the layer-group merge's same-machine A/B on the dense model (bench/ab.sh, W1 and W2,
# two rounds in bf16, two in fp8 weights + fp8 KV): old = main's build before the merge (7b5792b,
# its fused norms off by default, as 9cdab19's library), new = the merged branch's build (its
# library sources are main's after the fused norms were removed); the ceilings in the same call.
# Carry c1: scripts/device-carry.sh .carry/c1/{old,new} <kvtier, libkvtier_cuda.so>, the
#   libraries old/lib shares with new/lib removed; ../shared/anchors; COMMIT; strip; tar cJf.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=c1 . bench/results/device-call-prelude.sh
unset KVTIER_CUDA_MODULE   # each build loads the CUDA module next to its own program
N=$C/new
export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64
M=/tmp/kb/llama3-8b
mkdir -p /tmp/kb
$N/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
mk=$!
timeout 150 bash bench/results/2026-12-06-gpu-swa-32k/run.sh $N/bin/kvtier $R/swa 2>&1 | tee $R/swa.txt | cut -c1-300
rm -rf $R/swa/model/*.safetensors
echo "[$(el) s] swa"
wait $mk; echo "[$(el) s] mkmodel rc=$?"
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings rc=$?"
tar czf $OUT/c1.tgz -C /tmp r
MODEL_DIR=$M TIME_LIMIT=60 timeout $(( $(left) / 2 )) bash bench/ab.sh $C $R/ab-bf16 W1,W2 2 2>&1 | tee $R/ab-bf16.txt | grep -E "decode|prefill" | cut -c1-110
echo "[$(el) s] ab bf16"
tar czf $OUT/c1.tgz -C /tmp r
MODEL_DIR=$M TIME_LIMIT=60 BENCH_FLAGS="--weight-dtype fp8 --kv-dtype fp8" timeout $(( $(left) - 8 )) \
  bash bench/ab.sh $C $R/ab-fp8 W1,W2 2 2>&1 | tee $R/ab-fp8.txt | grep -E "decode|prefill" | cut -c1-110
echo "[$(el) s] ab fp8"
tar czf $OUT/c1.tgz -C /tmp r
