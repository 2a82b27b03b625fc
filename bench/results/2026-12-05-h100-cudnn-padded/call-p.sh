#!/usr/bin/env bash
# Call P: cuDNN's fused attention on the padded form (the chunk's sq and skv as device tensors,
# the graph's key rows padded), first on a GPU: the probe's form sweep, the library's form
# checked and timed (and what coarse plans cost: far more graph keys than the chunk has); the
# cuDNN tests and the backend's cuDNN cases; W4 (32k, bf16) with the prefill attention on our
# kernel and on cuDNN; then a Qwen3-30B-A3B-shaped random checkpoint (fp8 ct-channel on disk,
# which fits the machine's disk) through W1 and W2 in bf16 and, in a second pass of the same
# process, fp8 weights + fp8 KV, with the limits from the checkpoint's shape and the ceilings
# measured in this call.
# Carry p: scripts/device-carry.sh .carry/p <kvtier, libkvtier_cuda.so, kvtier_cuda_cudnn_test,
#   kvtier_cuda_backend_test, kvtier_cuda_moe_bench, cudnn_sdpa (nvcc line in bench/micro/cudnn_sdpa.cu)>,
#   ../shared/anchors copied in, COMMIT, SOURCE_DIR, strip --strip-debug, tar cJf.
CARRY=p . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
Q=/tmp/kb/qwen3-30b-a3b-fp8
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready
  $C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1; touch $Q.ready ) &
link_source_dir
use_torch_libraries
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$R/cudnn-log.txt timeout 40 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa sweep rc=$?"; grep -E "^FORM padded|library default" $R/cudnn_sdpa.txt | cut -c1-140 | head -12
timeout 60 $C/bin/cudnn_sdpa 3 > $R/cudnn_sdpa_3.txt 2>&1   # padded/stats/pbf16: the library's form
echo "[$(el) s] form 3 rc=$?"; grep -E "RESULT|illegal|error" $R/cudnn_sdpa_3.txt | cut -c1-190 | head -14
t cudnn 60 $C/bin/kvtier_cuda_cudnn_test
t backend 60 $C/bin/kvtier_cuda_backend_test --gtest_filter='*udnn*'
grep -hE "Failure" -A5 $R/tests/*.txt | head -30
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
w4_prefill_attention own cudnn
rm -rf $M
while [ ! -e $Q.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] qwen3moe written"; tail -1 $R/mkmodel-qwen3moe.txt
[ $(left) -gt 90 ] && timeout $(( $(left) - 8 )) $C/bin/kvtier bench --workload W1,W2 --model $Q --weight-dtype bf16 \
  --pass fp8:W1,W2:weight=fp8:kv=fp8 --ceilings $R/ceilings.txt --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 > $R/qwen3moe.txt 2>&1
echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W[12] " $R/qwen3moe.txt | cut -c1-160
tar czf $OUT/p.tgz -C /tmp r
