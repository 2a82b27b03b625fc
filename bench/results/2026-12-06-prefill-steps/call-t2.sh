#!/usr/bin/env bash
# Call T2: a long prompt's remainder first (Scheduler::FirstChunkLength: W8's 131,008-token
# prompt now starts with a 1,984-token chunk and ends with a full one, which cuDNN takes) in
# W8 bf16 and fp8, and W4 bf16 and fp8 KV beside it (issue #37); the TMA pipeline's new default
# in W2 fp8 graph steps (#34); then ncu over one W4 prefill chunk (2,048 tokens at 30,000
# positions, KVTIER_BENCH_PROFILE=w4p) in bf16 and in fp8 weights + fp8 KV: what a chunk spends
# outside its GEMMs and attention.
# Carry t2: scripts/pack-carry.sh t2 <kvtier, libkvtier_cuda.so, kvtier_cuda_bench> at this commit.
rm -rf /tmp/r
BUDGET=${BUDGET:-560} CARRY=${CARRY:-t2} . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
timeout 60 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait; echo "[$(el) s] ceilings + model: $(tail -1 $R/mkmodel.txt | cut -c1-100)"
use_torch_libraries
quick_step fp8-default $C/bin/kvtier_cuda_bench llama3-8b KVTIER_BENCH_WEIGHT_DTYPE=fp8
kbench w8-bf16 W8; tar czf $OUT/t2.tgz -C /tmp r
kbench w8-fp8 W8 --weight-dtype fp8 --kv-dtype fp8; tar czf $OUT/t2.tgz -C /tmp r
kbench w4-bf16 W4; tar czf $OUT/t2.tgz -C /tmp r
kbench w4-fp8kv W4 --kv-dtype fp8; tar czf $OUT/t2.tgz -C /tmp r
prof() {  # prof NAME WEIGHT KV
  [ "$(left)" -lt 60 ] && { echo "skip ncu $1: out of time"; return; }
  KVTIER_BENCH_PROFILE=w4p KVTIER_BENCH_WEIGHT_DTYPE=$2 KVTIER_BENCH_KV_DTYPE=$3 timeout $(( $(left) - 10 )) \
    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
    $C/bin/kvtier_cuda_bench llama3-8b > $R/ncu-$1.csv 2> $R/ncu-$1.err
  echo "[$(el) s] ncu $1 rc=$? kernels $(grep -c gpu__time_duration $R/ncu-$1.csv)"
  tar czf $OUT/t2.tgz -C /tmp r
}
prof w4p-bf16 bf16 bf16
prof w4p-fp8 fp8 fp8
