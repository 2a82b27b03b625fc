#!/usr/bin/env bash
# Call S1 (issues #34 and #41: the decode step's fixed costs). Carry s1: build-s1.sh.
# (1) Where a W8A8 skinny projection's time goes at 64 rows (kvtier_cuda_skinny_test's
#     SkinnyGemmTrace: per-CTA %globaltimer stamps, four calls plain and in a PDL graph).
# (2) QkvPost in the one-row qkv GEMV's epilogue, never yet run on a GPU: its tests (GemvQkvPost
#     bit for bit against the GEMV then the QkvPost kernel; the QkvPost and GEMV tests; the
#     backend's presets against the CPU on the fused path), then W1 graph steps
#     (KVTIER_BENCH_QUICK) of Llama-3-8B and Qwen3-30B-A3B, bf16 and fp8 weights: main (a),
#     the patch (q) and the patch with KVTIER_CUDA_QKV_POST_FUSED=0 (q0), then the reverse order.
rm -rf /tmp/r
BUDGET=${BUDGET:-560} CARRY=s1 . bench/results/device-call-prelude.sh
link_source_dir
KVTIER_SKINNY_BENCH_ROWS=64 t trace 60 $C/bin/kvtier_cuda_skinny_test --gtest_also_run_disabled_tests \
  --gtest_filter='SkinnyGemmTrace.*'
grep -E "^(qkv|o|gate_up|down) |span" $R/tests/trace.txt | head -40
tar czf $OUT/s1.tgz -C /tmp r
t kernels_q 100 $C/bin/kvtier_cuda_kernels_test_q --gtest_filter='*QkvPost*:*Gemv*'
t backend_q 120 $C/bin/kvtier_cuda_backend_test_q --gtest_filter='Presets/*'
tar czf $OUT/s1.tgz -C /tmp r
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
  tar czf $OUT/s1.tgz -C /tmp r
done
