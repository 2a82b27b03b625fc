#!/usr/bin/env bash
# Call H: the TMA pipeline's tuning. Its tests (fp8 codes at 128 and 256 bytes of each weight
# row per step), the per-shape bench with the tuning sweep (KVTIER_SKINNY_BENCH_SWEEP: row
# bytes, L2 promotion, eviction hints), then whole W1/W2 backend steps (kvtier_cuda_bench,
# KVTIER_BENCH_QUICK) for the default dispatch against the TMA pipeline under several tunings.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/h.txz -C /tmp/c
C=/tmp/c/h; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
timeout 150 $C/bin/kvtier_cuda_skinny_test > $R/skinny_test.txt 2>&1; rc=$?
echo "[$(el) s] skinny test rc=$rc: $(grep -cE '^\[       OK \]' $R/skinny_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/skinny_test.txt | cut -c1-100 | tr '\n' ' ')"
grep -E "Failure" -A6 $R/skinny_test.txt | head -20
KVTIER_SKINNY_BENCH_SWEEP=1 KVTIER_SKINNY_BENCH_ROWS=16,64,128 timeout 200 $C/bin/kvtier_cuda_skinny_test \
  --gtest_also_run_disabled_tests --gtest_filter='SkinnyGemmBench.*' > $R/skinny_bench.txt 2>&1; echo "[$(el) s] skinny bench rc=$?"
grep -E "^(qkv|o|gate_up|down) +64 .*(w8a8|bf16)" $R/skinny_bench.txt
step() {  # name, then env assignments
  local name=$1; shift
  env KVTIER_BENCH_QUICK=1 "$@" timeout 60 $C/bin/kvtier_cuda_bench > $R/step-$name.txt 2>&1
  echo "[$(el) s] $name rc=$?: $(grep -E 'decode' $R/step-$name.txt | sed 's/  */ /g; s/ (1 seq)//' | tr '\n' ';')"
}
step fp8-skinny1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_CUDA_SKINNY=1
for t in 128,256,1 128,0,0 256,256,1 256,0,0 256,0,1 256,128,0; do
  step fp8-tma-$t KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_CUDA_SKINNY=3 KVTIER_SKINNY_TMA=$t
done
step bf16-skinny1 KVTIER_CUDA_SKINNY=1
step bf16-tma-256,0,0 KVTIER_CUDA_SKINNY=3 KVTIER_SKINNY_TMA=256,0,0
step bf16-tma-256,256,1 KVTIER_CUDA_SKINNY=3 KVTIER_SKINNY_TMA=256,256,1
tar czf $OUT/h.tgz -C /tmp r
