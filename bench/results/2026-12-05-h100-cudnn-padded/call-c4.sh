#!/usr/bin/env bash
# Call C4, the default as landed (cuDNN for steps whose chunks fill the token budget, plans
# built at warm-up; shorter chunks on our kernel): the cuDNN tests and the backend's cuDNN
# case (every step on cuDNN); W4 bf16 and fp8 KV, W2 and W6 on the default against our kernel
# alone; then, with the 8B checkpoint and W6's disk file removed, a Qwen3-30B-A3B-shaped random
# checkpoint (fp8 ct-channel on disk) through W1 and W2 in bf16 and fp8 weights + fp8 KV.
# Carry c4: scripts/device-carry.sh .carry/c4 <kvtier, libkvtier_cuda.so, kvtier_cuda_cudnn_test,
#   kvtier_cuda_backend_test>; ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar cJf.
BUDGET=${BUDGET:-330} CARRY=c4 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
Q=/tmp/kb/qwen3-30b-a3b-fp8
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
link_source_dir
use_torch_libraries
t cudnn 40 $C/bin/kvtier_cuda_cudnn_test
t backend 40 $C/bin/kvtier_cuda_backend_test --gtest_filter='*udnn*'
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait; echo "[$(el) s] ceilings + model"
bench() {  # bench NAME ATTENTION WORKLOADS [FLAGS...]
  local name=$1 a=$2 w=$3; shift 3
  KVTIER_CUDA_PREFILL_ATTENTION=$a timeout 70 $C/bin/kvtier bench --workload $w --model $M --ceilings $R/ceilings.txt \
    --tier-dir /tmp/kb/tiers --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 40 "$@" > $R/$name.txt 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W4   prefill|^W2   decode|^W2   end|^W2   prefill|^W6   batch 128: mean" $R/$name.txt | cut -c1-120
  grep -ho '"prefill_attention": *"[^"]*"' $R/$name.json | sort -u | cut -c1-160; rm -rf /tmp/kb/tiers
}
bench default cudnn W4,W2,W6
bench default-fp8kv cudnn W4 --kv-dtype fp8
bench own own W2,W6
rm -rf $M
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1
echo "[$(el) s] qwen3moe rc=$?"; tail -1 $R/mkmodel-qwen3moe.txt
[ $(left) -gt 40 ] && timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1,W2 --model $Q --weight-dtype bf16 \
  --pass fp8:W1,W2:weight=fp8:kv=fp8 --ceilings $R/ceilings.txt --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" \
  --time-limit 40 > $R/qwen3moe.txt 2>&1
echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W[12] |load" $R/qwen3moe.txt | cut -c1-160
tar czf $OUT/c4.tgz -C /tmp r
