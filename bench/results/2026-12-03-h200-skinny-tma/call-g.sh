#!/usr/bin/env bash
# Call G: the skinny projection's TMA pipeline (skinny_gemm_tma.cuh). Its tests against the
# CPU (every pipeline, partial tiles, few CTAs, graph replay), the per-shape bench of every
# kernel at 16-128 rows, then whole backend steps (kvtier_cuda_bench, random Llama-3-8B
# weights, KVTIER_BENCH_QUICK) with the default dispatch (cuda_skinny_gemm 1) against the TMA
# pipeline on every projection (3), in bf16 and fp8 (W8A8), and an ncu per-kernel timing of
# one W2 fp8 graph step.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/g.txz -C /tmp/c
C=/tmp/c/g; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
timeout 150 $C/bin/kvtier_cuda_skinny_test > $R/skinny_test.txt 2>&1; rc=$?
echo "[$(el) s] skinny test rc=$rc: $(grep -cE '^\[       OK \]' $R/skinny_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/skinny_test.txt | cut -c1-100 | tr '\n' ' ')"
grep -E "Failure" -A6 $R/skinny_test.txt | head -20
timeout 25 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; grep -iE "copy|hbm" $R/ceilings.txt | head -3
KVTIER_SKINNY_BENCH_ROWS=16,32,64,128 timeout 150 $C/bin/kvtier_cuda_skinny_test --gtest_also_run_disabled_tests \
  --gtest_filter='SkinnyGemmBench.*' > $R/skinny_bench.txt 2>&1; echo "[$(el) s] skinny bench rc=$?"
grep -E "^(qkv|o|gate_up|down|lm_head) +(16|64|128) " $R/skinny_bench.txt
for w in bf16 fp8; do for mode in 1 3; do
  env KVTIER_BENCH_QUICK=1 KVTIER_CUDA_SKINNY=$mode $( [ $w = fp8 ] && echo KVTIER_BENCH_WEIGHT_DTYPE=fp8 ) \
    timeout 90 $C/bin/kvtier_cuda_bench > $R/step-$w-skinny$mode.txt 2>&1
  echo "[$(el) s] $w skinny=$mode rc=$?: $(grep -E 'decode|prefill' $R/step-$w-skinny$mode.txt | sed 's/  */ /g' | tr '\n' ';')"
done; done
mode=3; grep -q "FAILED  \] Skinny" $R/skinny_test.txt && mode=1
KVTIER_BENCH_PROFILE=w2 KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_CUDA_SKINNY=$mode timeout $(( 560 - $(el) )) \
  ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
  $C/bin/kvtier_cuda_bench > $R/ncu-w2-fp8-skinny$mode.csv 2> $R/ncu.err; echo "[$(el) s] ncu (skinny $mode) rc=$?"
tail -3 $R/ncu.err
tar czf $OUT/g.tgz -C /tmp r
