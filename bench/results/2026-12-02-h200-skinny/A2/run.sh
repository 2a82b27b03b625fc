#!/bin/bash
# skinny A2 (issue #17): kernel tests, per-shape bench, W2 fp8 / bf16 with the skinny kernels and
# without (KVTIER_CUDA_SKINNY=0, the previous paths, same process build).
set -o pipefail
export LD_LIBRARY_PATH=$H/lib:$LD_LIBRARY_PATH KVTIER_CUDA_MODULE=$H/lib/libkvtier_cuda.so
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
el "skinny test"
timeout 8 $H/bin/kvtier_cuda_skinny_test > $R/skinny_test.txt 2>&1; echo "test rc=$?"; grep -E "OK|FAILED|PASSED|Failure|row " $R/skinny_test.txt | head -20
el "skinny bench"
KVTIER_SKINNY_BENCH_ROWS=16,64 timeout 6 $H/bin/kvtier_cuda_skinny_test --gtest_also_run_disabled_tests --gtest_filter="SkinnyGemmBench.*" 2>&1 | grep -E "^(qkv|o |gate|down|lm_)" | tee $R/skinny_bench.txt
while [ ! -e $MODEL.ready ]; do sleep 1; done
run() {  # name, env, args
  el "W2 $1"
  env $2 timeout 10 $H/bin/kvtier bench --workload W2 --model $MODEL --time-limit 6 --json $R/w2-$1.json $3 2>&1 \
    | grep -E "^W2|error|Error" | tee $R/w2-$1.txt
}
run fp8 "KVTIER_CUDA_SKINNY=1" "--weight-dtype fp8"
run fp8-off "KVTIER_CUDA_SKINNY=0" "--weight-dtype fp8"
run bf16 "KVTIER_CUDA_SKINNY=1" ""
run bf16-off "KVTIER_CUDA_SKINNY=0" ""
el "done"
