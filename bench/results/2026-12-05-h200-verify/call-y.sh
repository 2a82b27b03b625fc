#!/usr/bin/env bash
# Call Y: the most that one device call can check at main, in order of what users get by
# default: the fp8 KV kernels on the CPU's bytes under Gemma's scores and every model case of
# the backend test (fp8 KV under Gemma's scores is on by default; the MoE presets and the
# overlapped attention ride along), the family and MoE goldens, the MoE kernels, NCCL from
# torch's wheel; then cuDNN's prefill attention: its tests and W4 (32k) bf16 with
# KVTIER_CUDA_PREFILL_ATTENTION=own and =cudnn, ceilings of the same call.
# Carry: ninja kvtier_cli kvtier_cuda kvtier_cuda_{backend,fp8,parity,moe,nccl,cudnn}_test;
#   scripts/device-carry.sh .carry/y build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/kvtier_cuda_{backend,fp8,parity,moe,nccl,cudnn}_test;
#   anchors, COMMIT, SOURCE_DIR (pwd); strip --strip-debug; tar cJf.
CARRY=y . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
mkdir -p $R/tests
left() { echo $(( ${BUDGET:-578} - $(el) )); }  # BUDGET: seconds the call may run, less a margin to pack
t() { local name=$1 lim=$2; shift 2; [ $(left) -lt 15 ] && { echo "skip $name: out of time"; return; }
  [ $lim -gt $(left) ] && lim=$(left)
  timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
SRC=$(cat $C/SOURCE_DIR)
[ -f "$SRC/tests/parity/moe_goldens.json" ] || { mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; }
export KVTIER_CLI=$C/bin/kvtier
SITE=$(python3 -c 'import site;print(" ".join(site.getsitepackages()))')
NCCL_LIB=$(find $SITE -name 'libnccl.so.2' 2>/dev/null | head -1)
CUDNN_LIB=$(find $SITE -name 'libcudnn.so.9' 2>/dev/null | head -1)
echo "NCCL: ${NCCL_LIB:-none}; cuDNN: ${CUDNN_LIB:-none}"
export KVTIER_NCCL_LIBRARY=$NCCL_LIB NCCL_NVLS_ENABLE=0 KVTIER_CUDNN_LIBRARY=$CUDNN_LIB
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "${CUDNN_LIB:-/x/y}")
t fp8 100 $C/bin/kvtier_cuda_fp8_test
t backend 200 $C/bin/kvtier_cuda_backend_test --gtest_filter="${BACKEND_FILTER:-*}"  # e.g. *gemma* when short of time
t moe 60 $C/bin/kvtier_cuda_moe_test
t parity 90 $C/bin/kvtier_cuda_parity_test
t nccl 30 $C/bin/kvtier_cuda_nccl_test
t cudnn 60 $C/bin/kvtier_cuda_cudnn_test
grep -hE "Failure" -A6 $R/tests/*.txt | head -50
grep -hE "^\[(tiny|small)|^\[cuda parity\]" $R/tests/*.txt | cut -c1-140 | head -40
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
w4_prefill_attention own cudnn
tar czf $OUT/y.tgz -C /tmp r
