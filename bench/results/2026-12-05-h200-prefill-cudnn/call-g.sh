#!/usr/bin/env bash
# Call G: the CUDA backend's model tests at main: every model case against the CPU backend (Gemma, Phi-3, the others, and fp8 KV under
# Gemma's scores with its bound taken from the CPU), the fp8 kernels on the same bytes as the
# CPU (scale, soft-cap and window included), the family goldens, and the prefill kernel tests.
# Carry: ninja kvtier_cuda kvtier_cuda_{backend,prefill,fp8,parity}_test kvtier_cli; then
#   scripts/device-carry.sh .carry/g build/src/backend/cuda/libkvtier_cuda.so build/tools/kvtier/kvtier
#   build/tests/backend_cuda/kvtier_cuda_{backend,prefill,fp8,parity}_test;
#   COMMIT, SOURCE_DIR (pwd); strip; tar cJf.
CARRY=g . bench/results/device-call-prelude.sh
mkdir -p $R/tests
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
SRC=$(cat $C/SOURCE_DIR)
[ -f "$SRC/tests/parity/moe_goldens.json" ] || { mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; }
export KVTIER_CLI=$C/bin/kvtier
t fp8 150 $C/bin/kvtier_cuda_fp8_test
t backend 240 $C/bin/kvtier_cuda_backend_test
t parity 120 $C/bin/kvtier_cuda_parity_test
t prefill 90 $C/bin/kvtier_cuda_prefill_test
grep -hE "Failure" -A6 $R/tests/*.txt | head -40
grep -hE "^\[(tiny|small)" $R/tests/backend.txt | cut -c1-140 | head -60
tar czf $OUT/g.tgz -C /tmp r
