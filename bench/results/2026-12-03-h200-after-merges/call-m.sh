#!/usr/bin/env bash
# Call M: the skinny kernels after the review (tensor maps cached per thread, the tile finish
# without its derivable template parameter): the skinny and backend tests, and whole W1/W2
# steps in fp8 (graph) against calls G-K.
set -u
mkdir -p /tmp/c && tar xJf .carry/m.txz -C /tmp/c
C=/tmp/c/m; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
timeout 90 $C/bin/kvtier_cuda_skinny_test > $R/skinny.txt 2>&1; echo "skinny rc=$?: $(grep -c '^\[       OK \]' $R/skinny.txt) ok $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/skinny.txt | tr '\n' ' ')"
timeout 120 $C/bin/kvtier_cuda_backend_test > $R/backend.txt 2>&1; echo "backend rc=$?: $(grep -c '^\[       OK \]' $R/backend.txt) ok $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/backend.txt | tr '\n' ' ')"
KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 timeout 60 $C/bin/kvtier_cuda_bench > $R/step-fp8.txt 2>&1
echo "fp8 rc=$?: $(grep -E 'decode' $R/step-fp8.txt | sed 's/  */ /g' | tr '\n' ';')"
tar czf $OUT/m.tgz -C /tmp r
