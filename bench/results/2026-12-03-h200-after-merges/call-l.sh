#!/usr/bin/env bash
# Call L: the fp8 prefill test with its near-tie rule, 30 random models in a row, then the
# whole backend test once more.
set -u
mkdir -p /tmp/c && tar xJf .carry/l.txz -C /tmp/c
C=/tmp/c/l; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
timeout 150 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Fp8PrefillStepsRunW8A8*' --gtest_repeat=30 > $R/repeat.txt 2>&1
echo "repeat rc=$?: $(grep -c '^\[       OK \]' $R/repeat.txt) ok, $(grep -c '^\[  FAILED  \] CudaBackendTest' $R/repeat.txt) failed"
grep -E "top token" $R/repeat.txt | head -5
timeout 120 $C/bin/kvtier_cuda_backend_test > $R/backend.txt 2>&1; echo "backend rc=$?: $(grep -c '^\[       OK \]' $R/backend.txt) ok"
grep -E '^\[  FAILED  \] [A-Za-z]' $R/backend.txt | head
tar czf $OUT/l.tgz -C /tmp r
