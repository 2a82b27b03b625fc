#!/usr/bin/env bash
# Call B: the W8A8 kernels and the GPU memory account on the H200 — CUDA tests (fp8
# activations, cuBLASLt fp8, skinny W8A8, backend W8A8 vs the CPU, the 30-engine memory
# test), the fp8 GEMM micro-benchmarks, then W1/W2 in bf16, fp8 (W8A8) and fp8 + fp8 KV in
# one bench process, and fp8 W1/W2 again with KVTIER_CUDA_FP8_ACTIVATIONS=0 (W8A16) for the A/B.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/b.txz -C /tmp/c
C=/tmp/c/b; R=$OUT; mkdir -p $R/tests
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok, $(grep -E '^\[  (FAILED|SKIPPED) ' $R/tests/$name.txt | tr '\n' ' ')"; }
t fp8 120 $C/bin/kvtier_cuda_fp8_test
t skinny 120 $C/bin/kvtier_cuda_skinny_test
t backend 180 $C/bin/kvtier_cuda_backend_test
t memory 150 $C/bin/kvtier_cuda_memory_test
grep -hE "W8A8 relative|gpu memory cap: (an engine|first)|engine 29" $R/tests/*.txt
grep -hE "Failure|Expected|Which is|actual" -A3 $R/tests/*.txt | head -40
timeout 90 $C/bin/fp8_lt_gemm > $R/fp8_lt_gemm.txt 2>&1; echo "[$(el) s] fp8_lt_gemm rc=$?"
grep -E "^layer" $R/fp8_lt_gemm.txt
KVTIER_SKINNY_BENCH_ROWS=16,32,64,128 timeout 120 $C/bin/kvtier_cuda_skinny_test --gtest_also_run_disabled_tests \
  --gtest_filter='SkinnyGemmBench.*' > $R/skinny_bench.txt 2>&1; echo "[$(el) s] skinny bench rc=$?"
grep -E "fp8 skinny|w8a8|SkinnyFp8" $R/skinny_bench.txt | head -60
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout 200 $C/bin/kvtier bench --workload W1,W2 --model $M --json $R/bench.json --commit "$(cat $C/COMMIT)" --time-limit 40 \
  --pass fp8:W1,W2:weight=fp8 --pass fp8-kv8:W1,W2:weight=fp8:kv=fp8 > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W[12] .*(decode tok|prefill tok|end-to-end)" $R/bench.txt
KVTIER_CUDA_FP8_ACTIVATIONS=0 timeout 120 $C/bin/kvtier bench --workload W1,W2 --model $M --weight-dtype fp8 \
  --json $R/bench-fp8-w8a16.json --commit "$(cat $C/COMMIT)" --time-limit 40 > $R/bench-fp8-w8a16.txt 2>&1
echo "[$(el) s] fp8 W8A16 bench rc=$?"
grep -E "^W[12] .*(decode tok|prefill tok|end-to-end)" $R/bench-fp8-w8a16.txt
cd $R && tar czf tests.tgz tests && rm -rf tests
