#!/usr/bin/env bash
# Call N5 (prepared; issues #34 and #41: the one-row decode step's fixed costs): QkvPost run in
# the qkv GEMV's epilogue (qkv-post-epilogue.patch), never yet run on a GPU. (1) its tests:
# GemvQkvPost bit for bit against the GEMV then the QkvPost kernel (16-bit and fp8 weights and
# KV, graph replays), the QkvPost and GEMV tests, and the backend's presets against the CPU on the
# fused path; (2) W1 graph steps (KVTIER_BENCH_QUICK) of Llama-3-8B and Qwen3-30B-A3B, bf16
# and fp8 weights: main (a), the patch (q) and the patch with KVTIER_CUDA_QKV_POST_FUSED=0
# (q0, the same binary without the fusion), then again in the reverse order.
# Carry n5: build-n5.sh.
rm -rf /tmp/r
BUDGET=${BUDGET:-520} CARRY=n5 . bench/results/device-call-prelude.sh
link_source_dir
t kernels_q 120 $C/bin/kvtier_cuda_kernels_test_q --gtest_filter='*QkvPost*:*Gemv*'
t backend_q 150 $C/bin/kvtier_cuda_backend_test_q --gtest_filter='Presets/*'
tar czf $OUT/n5.tgz -C /tmp r
quick() {  # quick NAME PRESET VARIANT DTYPE
  local bin=$3 fused=1
  [ "$3" = q0 ] && { bin=q; fused=0; }
  KVTIER_CUDA_QKV_POST_FUSED=$fused KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$4 timeout 60 \
    $C/bin/kvtier_cuda_bench_$bin $2 > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W1 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="a q q0"; [ $round = 2 ] && order="q0 q a"
  for preset in llama3-8b qwen3-30b-a3b; do
    for v in $order; do
      for d in bf16 fp8; do [ "$(left)" -gt 30 ] && quick $preset-$v-$d-$round $preset $v $d; done
    done
  done
  tar czf $OUT/n5.tgz -C /tmp r
done
