#!/usr/bin/env bash
# Call X: what the merges of this round added, checked at main: NCCL loaded from torch's wheel
# and its all-reduce (one rank on a one-GPU machine); the decode attention beside the prefill
# attention (cuda_overlap_attention) giving the same bits, then W9 fp8 + fp8 KV with it off and
# on (one process each, ceilings of the same call); the wgmma prefill's scored instances
# (KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1) against the host and the CPU backend, as far as time
# allows (call-w.sh under bench/results/2026-12-05-h200-wgmma-scores has the full set).
# Carry: ninja kvtier_cli kvtier_cuda kvtier_cuda_{prefill,fp8,backend,nccl}_test;
#   scripts/device-carry.sh .carry/x build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/kvtier_cuda_{prefill,fp8,backend,nccl}_test; anchors, COMMIT; strip; tar cJf.
CARRY=x . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
mkdir -p $R/tests
left() { echo $(( 575 - $(el) )); }
t() { local name=$1 lim=$2; shift 2; [ $(left) -lt 15 ] && { echo "skip $name: out of time"; return; }
  [ $lim -gt $(left) ] && lim=$(left)
  timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
# torch's wheel's NCCL, wherever the wheel keeps it.
NCCL_LIB=$(find $(python3 -c 'import site;print(" ".join(site.getsitepackages()))') -name 'libnccl.so.2' 2>/dev/null | head -1)
echo "NCCL: ${NCCL_LIB:-none found}"
export KVTIER_NCCL_LIBRARY=$NCCL_LIB NCCL_NVLS_ENABLE=0
t nccl 60 $C/bin/kvtier_cuda_nccl_test
t overlap 120 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Overlapped*'
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
for o in 0 1; do
  [ $(left) -lt 100 ] && { echo "skip W9 overlap=$o: out of time"; continue; }
  KVTIER_CUDA_OVERLAP_ATTENTION=$o timeout $(( $(left) - 10 )) $C/bin/kvtier bench --workload W9 --model $M \
    --ceilings $R/ceilings.txt --json $R/w9-overlap$o.json --commit "$(cat $C/COMMIT)" --time-limit 150 \
    --weight-dtype fp8 --kv-dtype fp8 > $R/w9-overlap$o.txt 2>&1
  echo "[$(el) s] W9 overlap=$o rc=$?"; grep -E "^W9 " $R/w9-overlap$o.txt | cut -c1-160
done
ON="env KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1"
t prefill-scores 120 $ON $C/bin/kvtier_cuda_prefill_test --gtest_filter='*PrefillWgmmaScoresTest*:*PrefillAttentionScoresTest*'
t backend-gemma-on 90 $ON $C/bin/kvtier_cuda_backend_test --gtest_filter='*gemma*'
t fp8-prefill 90 $ON $C/bin/kvtier_cuda_fp8_test --gtest_filter='*KvFp8AttentionTest.Prefill*'
grep -hE "Failure" -A6 $R/tests/*.txt | head -40
tar czf $OUT/x.tgz -C /tmp r
