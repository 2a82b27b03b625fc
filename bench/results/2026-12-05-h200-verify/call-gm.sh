#!/usr/bin/env bash
# Call GM: the first GPU check of the fp8-KV refusal lifted for Gemma's scores and of the CUDA
# mixture-of-experts MLP: the fp8 kernels on the CPU's bytes (scale, soft-cap, window), every
# model case of the backend test (Gemma fp8 KV, Mixtral and Qwen3-MoE presets included), the
# family and MoE goldens, the prefill kernels and the MoE kernel and layer tests; then, as time
# allows, the MoE tests under compute-sanitizer and kvtier_cuda_moe_bench.
# Carry: ninja kvtier_cli kvtier_cuda kvtier_cuda_{backend,prefill,fp8,parity,moe}_test kvtier_cuda_moe_bench;
#   scripts/device-carry.sh .carry/gm build/src/backend/cuda/libkvtier_cuda.so build/tools/kvtier/kvtier
#   build/tests/backend_cuda/kvtier_cuda_{backend,prefill,fp8,parity,moe}_test build/tests/backend_cuda/kvtier_cuda_moe_bench;
#   anchors, COMMIT, SOURCE_DIR (pwd); strip --strip-debug; tar cJf.
CARRY=gm . bench/results/device-call-prelude.sh
mkdir -p $R/tests
left() { echo $(( 585 - $(el) )); }
t() { local name=$1 lim=$2; shift 2; [ $(left) -lt 20 ] && { echo "skip $name: out of time"; return; }
  [ $lim -gt $(left) ] && lim=$(left)
  timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
SRC=$(cat $C/SOURCE_DIR)
[ -f "$SRC/tests/parity/moe_goldens.json" ] || { mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; }
export KVTIER_CLI=$C/bin/kvtier
t fp8 120 $C/bin/kvtier_cuda_fp8_test
t moe 120 $C/bin/kvtier_cuda_moe_test
t backend 240 $C/bin/kvtier_cuda_backend_test
t parity 120 $C/bin/kvtier_cuda_parity_test
t prefill 90 $C/bin/kvtier_cuda_prefill_test --gtest_filter='-*Timing*'
grep -hE "Failure" -A6 $R/tests/*.txt | head -50
grep -hE "^\[(tiny|small)|^\[cuda parity\]" $R/tests/*.txt | cut -c1-140 | head -60
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$SAN" ] && t moe-memcheck 150 $SAN --tool memcheck --error-exitcode 9 $C/bin/kvtier_cuda_moe_test \
    --gtest_filter='MoeKernelsTest.GroupRoutes*:MoeKernelsTest.ExpertGemm*:MoeLayerTest.ReplaysAsACapturedGraph' \
  && grep -E "ERROR SUMMARY|Invalid" $R/tests/moe-memcheck.txt | head -10
if [ $(left) -gt 60 ]; then
  timeout $(left) $C/bin/kvtier_cuda_moe_bench > $R/moe_bench.txt 2>&1
  echo "[$(el) s] moe bench rc=$?"
  grep -E "^HBM|^moe .* tile auto " $R/moe_bench.txt | cut -c1-170
fi
tar czf $OUT/gm.tgz -C /tmp r
