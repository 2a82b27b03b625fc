#!/usr/bin/env bash
# Call M1, MoE speed (issue #41): kvtier_cuda_moe_bench (one MoE layer on Qwen3-30B-A3B's and
# Mixtral 8x7B's shapes, bf16 and fp8 experts, every tile shape, against the HBM ceiling of
# the same run), then a Qwen3-30B-A3B-shaped random checkpoint (fp8 ct-channel on disk) through
# W1 and W2 in bf16 weights and in fp8 weights + fp8 KV, with the ceilings of the same call.
# Carry m1: scripts/device-carry.sh .carry/m1 <kvtier, libkvtier_cuda.so,
#   kvtier_cuda_moe_bench>; ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar cJf.
BUDGET=${BUDGET:-560} CARRY=m1 . bench/results/device-call-prelude.sh
Q=/tmp/kb/qwen3-30b-a3b-fp8
mkdir -p /tmp/kb
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1 &
use_torch_libraries
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
timeout 100 $C/bin/kvtier_cuda_moe_bench > $R/moe_bench.txt 2>&1
echo "[$(el) s] moe_bench rc=$?"; grep -E "^HBM|^moe .* tile auto " $R/moe_bench.txt | cut -c1-170
wait; echo "[$(el) s] qwen3moe: $(tail -1 $R/mkmodel-qwen3moe.txt)"
timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1,W2 --model $Q --weight-dtype bf16 \
  --pass fp8:W1,W2:weight=fp8:kv=fp8 --ceilings $R/ceilings.txt --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 > $R/qwen3moe.txt 2>&1
echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W[12] |loading|weights" $R/qwen3moe.txt | cut -c1-160 | tail -20
tar czf $OUT/m1.tgz -C /tmp r
