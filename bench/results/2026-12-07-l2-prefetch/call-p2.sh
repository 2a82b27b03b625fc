#!/usr/bin/env bash
# Call P2 (issues #41 and #34): the defaults P1 chose, checked and measured.
# - cuda_l2_prefetch -1 = 3: the o projection's weights asked into L2 during QkvPost (1), the
#   next layer's qkv during a mixture-of-experts router (2);
# - cuda_gemv_bulk -1: one row's fp8 codes through the copy engine in matrices up to 12 MiB.
# (1) this call's ceilings while `kvtier mkmodel` writes a Qwen3-30B-A3B fp8 checkpoint;
# (2) tests: the kernels', the MoE path's, the backend's presets against the CPU backend (the
# defaults now run the prefetches and the fp8 bulk GEMV);
# (3) W1 graph decode steps (KVTIER_BENCH_QUICK=w1), the defaults against both off, four rounds
# in alternating order; (4) `kvtier bench` W1 on the Qwen3-30B-A3B checkpoint in bf16 and in fp8
# weights + fp8 KV, defaults.
# Carry p2: scripts/pack-carry.sh p2 build/tests/backend_cuda/kvtier_cuda_{moe_test,bench,kernels_test,fp8_test,
#   backend_test} build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=p2 . bench/results/device-call-prelude.sh; link_source_dir
Q=/dev/shm/qwen3-30b-a3b
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1 &
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
t moe_test 60 $C/bin/kvtier_cuda_moe_test
t fp8_gemv_test 40 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*Gemv*'
t kernels_test 40 $C/bin/kvtier_cuda_kernels_test --gtest_filter='*Gemv*:*QkvPost*'
t backend 150 $C/bin/kvtier_cuda_backend_test
tar czf $OUT/p2.tgz -C /tmp r
quick() {  # quick NAME PRESET DTYPE [ENV=VALUE...]
  local name=$1 preset=$2 dtype=$3; shift 3
  [ "$(left)" -gt 200 ] || { echo "skip $name: out of time"; return; }
  env "$@" KVTIER_BENCH_QUICK=w1 KVTIER_BENCH_WEIGHT_DTYPE=$dtype timeout 30 \
    $C/bin/kvtier_cuda_bench $preset > $R/quick-$name.txt 2>&1
  local rc=$?
  echo "[$(el) s] $name rc=$rc $(grep -E "W1 decode.*graph" $R/quick-$name.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2 3 4; do
  for v in def off; do
    [ $((round % 2)) = 0 ] && v=$([ $v = def ] && echo off || echo def)
    off=(); [ $v = off ] && off=(KVTIER_CUDA_L2_PREFETCH=0 KVTIER_CUDA_GEMV_BULK=0)
    bf16off=(); [ $v = off ] && bf16off=(KVTIER_CUDA_L2_PREFETCH=0)
    quick q-bf16-$v-$round qwen3-30b-a3b bf16 "${bf16off[@]}"
    quick q-fp8-$v-$round qwen3-30b-a3b fp8 "${off[@]}"
    quick l-bf16-$v-$round llama3-8b bf16 "${bf16off[@]}"
    quick l-fp8-$v-$round llama3-8b fp8 "${bf16off[@]}"
  done
done
tar czf $OUT/p2.tgz -C /tmp r
wait; echo "[$(el) s] $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
w1() {  # w1 NAME FLAGS...
  local name=$1; shift
  [ "$(left)" -lt 50 ] && { echo "skip $name: out of time"; return; }
  timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1 --model $Q "$@" \
    --ceilings $R/ceilings.txt --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 30 > $R/$name.txt 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W1 " $R/$name.txt | cut -c1-110
}
w1 qwen3moe-bf16 --weight-dtype bf16
tar czf $OUT/p2.tgz -C /tmp r
w1 qwen3moe-fp8 --weight-dtype fp8 --kv-dtype fp8
tar czf $OUT/p2.tgz -C /tmp r
