#!/usr/bin/env bash
# Call P1 (issues #41 and #34, one-row decode steps): the weights of the projection after a
# latency-bound kernel asked into L2 while that kernel runs (CudaLaunchOptions::l2_prefetch,
# KVTIER_CUDA_L2_PREFETCH, a sum of: 1 the o projection's during QkvPost, 2 an MoE layer's
# chosen down matrices during its gate|up, 4 the next layer's qkv during an MoE router, 8 the o
# projection's during the decode attention),
# and the fp8 one-row GEMV through the copy engine where the matrix fits (KVTIER_CUDA_GEMV_BULK=1).
# (1) tests: the MoE decode path's bits with the down prefetch, the fp8 GEMVs' bulk bits;
# (2) W1 graph decode steps (KVTIER_BENCH_QUICK=w1, each variant its own process) of
# qwen3-30b-a3b and llama3-8b in bf16 and fp8 weights, one order then the reverse.
# Carry p1: scripts/pack-carry.sh p1 build/tests/backend_cuda/kvtier_cuda_{moe_test,bench,kernels_test,fp8_test}
#   build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-570} CARRY=p1 . bench/results/device-call-prelude.sh; link_source_dir
t moe_test 90 $C/bin/kvtier_cuda_moe_test
t fp8_gemv_test 60 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*Gemv*'
t kernels_test 60 $C/bin/kvtier_cuda_kernels_test --gtest_filter='*Gemv*:*QkvPost*'
tar czf $OUT/p1.tgz -C /tmp r
quick() {  # quick NAME PRESET DTYPE L2_PREFETCH GEMV_BULK(-: unset)
  [ "$(left)" -gt 30 ] || { echo "skip $1: out of time"; return; }
  local bulk=(); [ "$5" != - ] && bulk=(KVTIER_CUDA_GEMV_BULK=$5)
  env "${bulk[@]}" KVTIER_CUDA_L2_PREFETCH=$4 KVTIER_BENCH_QUICK=w1 KVTIER_BENCH_WEIGHT_DTYPE=$3 timeout 45 \
    $C/bin/kvtier_cuda_bench $2 > $R/quick-$1.txt 2>&1
  local rc=$?
  echo "[$(el) s] $1 rc=$rc $(grep -E "W1 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
variants=(
  "q-bf16-0 qwen3-30b-a3b bf16 0 -" "q-bf16-2 qwen3-30b-a3b bf16 2 -" "q-bf16-4 qwen3-30b-a3b bf16 4 -"
  "q-bf16-6 qwen3-30b-a3b bf16 6 -"
  "q-fp8-0 qwen3-30b-a3b fp8 0 -" "q-fp8-6 qwen3-30b-a3b fp8 6 -" "q-fp8-8 qwen3-30b-a3b fp8 8 -"
  "q-fp8-14 qwen3-30b-a3b fp8 14 -" "q-fp8-0b qwen3-30b-a3b fp8 0 1" "q-fp8-6b qwen3-30b-a3b fp8 6 1"
  "l-bf16-0 llama3-8b bf16 0 -" "l-bf16-1 llama3-8b bf16 1 -" "l-bf16-8 llama3-8b bf16 8 -"
  "l-fp8-0 llama3-8b fp8 0 -" "l-fp8-1 llama3-8b fp8 1 -" "l-fp8-8 llama3-8b fp8 8 -" "l-fp8-0b llama3-8b fp8 0 1"
  "l-fp8-8b llama3-8b fp8 8 1"
)
for round in 1 2; do
  n=${#variants[@]}
  for ((i = 0; i < n; ++i)); do
    j=$i; [ $round = 2 ] && j=$((n - 1 - i))
    set -- ${variants[$j]}
    quick $1-$round $2 $3 $4 $5
  done
  tar czf $OUT/p1.tgz -C /tmp r
done
