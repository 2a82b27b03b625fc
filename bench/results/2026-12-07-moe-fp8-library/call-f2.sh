#!/usr/bin/env bash
# Call F2 (issue #41): after F1, (a) the routing's rows without probabilities (NaN logits: F1's
# W6 prefill step on Mixtral read a random fp8 KV prefix and crashed both builds) and (b) kAuto
# taking the grouped cuBLAS GEMM for Qwen3-MoE's 16-bit experts from 64 routes per expert.
#  1. kvtier_cuda_moe_test, then its MoE-layer tests under compute-sanitizer memcheck; the
#     backend's presets against the CPU backend;
#  2. kvtier_cuda_moe_bench qwen3 (kAuto's pick per row count);
#  3. kvtier_cuda_bench prefill steps (KVTIER_BENCH_PREFILL) of Qwen3-30B-A3B bf16, old (66643ae,
#     before this session) and new in the order old, new, new, old; Mixtral 8x7B fp8 + fp8 KV new
#     (the W6 step that crashed in F1).
# Carry f2: scripts/pack-carry.sh f2 build/tests/backend_cuda/{kvtier_cuda_moe_test,kvtier_cuda_moe_bench,
#   kvtier_cuda_backend_test,kvtier_cuda_bench} /work/old/build/tests/backend_cuda/kvtier_cuda_bench=kvtier_cuda_bench_old
rm -rf /tmp/r
BUDGET=${BUDGET:-400} CARRY=f2 . bench/results/device-call-prelude.sh; link_source_dir
t moe 90 $C/bin/kvtier_cuda_moe_test
t backend_moe 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Preset*:*Moe*:*Mixtral*:*Qwen3*'
timeout 100 $C/bin/kvtier_cuda_moe_bench qwen3 > $R/moe_bench_qwen3.txt 2>&1
echo "[$(el) s] moe bench qwen3 rc=$?"; grep -E "bf16 rows +(512|2048) tile (auto|grouped|64x64)" $R/moe_bench_qwen3.txt | cut -c20-100
tar czf $OUT/f2.tgz -C /tmp r
prefill() {  # prefill NAME BINARY PRESET [VAR=VALUE...]
  local name=$1 program=$2 preset=$3; shift 3
  env KVTIER_BENCH_PREFILL=1 "$@" timeout 100 $C/bin/$program $preset > $R/prefill-$name.txt 2>&1
  echo "[$(el) s] $name rc=$? $(grep -E "ms/step|ABORTED" $R/prefill-$name.txt | tr -s ' ' | cut -c1-70 | tr '\n' '|')"
}
prefill qwen3-old-1 kvtier_cuda_bench_old qwen3-30b-a3b; prefill qwen3-new-1 kvtier_cuda_bench qwen3-30b-a3b
prefill qwen3-new-2 kvtier_cuda_bench qwen3-30b-a3b; prefill qwen3-old-2 kvtier_cuda_bench_old qwen3-30b-a3b
tar czf $OUT/f2.tgz -C /tmp r
prefill mixtral-fp8-new kvtier_cuda_bench mixtral-8x7b KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8
tar czf $OUT/f2.tgz -C /tmp r
[ "$(left)" -gt 100 ] && { timeout $(( $(left) - 10 )) compute-sanitizer --tool memcheck --print-limit 5 \
  $C/bin/kvtier_cuda_moe_test --gtest_filter='MoeLayerTest.*' > $R/tests/moe-memcheck.txt 2>&1
  echo "[$(el) s] memcheck rc=$? $(grep -E "ERROR SUMMARY|PASSED|FAILED" $R/tests/moe-memcheck.txt | head -3 | tr '\n' ' ')"; }
tar czf $OUT/f2.tgz -C /tmp r
