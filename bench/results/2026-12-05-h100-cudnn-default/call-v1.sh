#!/usr/bin/env bash
# Call V1: the cuDNN prefill default as landed (steps whose chunks fill the token budget and
# end at least four budgets into their context go to cuDNN; plans built at warm-up) checked
# whole: the GPU test programs (backend, parity goldens, cuDNN, prefill, memory, MoE), then
# each workload in its own process on the default against the wgmma kernel alone
# (KVTIER_CUDA_PREFILL_ATTENTION=own): W4 bf16 and fp8 KV, W6, W3 (its 24 GiB cap now holds
# cuDNN's scratch too), and W8 if time is left.
# Carry v1: scripts/device-carry.sh .carry/v1 <kvtier, libkvtier_cuda.so, kvtier_cuda_{backend,
#   parity,cudnn,prefill,memory,moe}_test>; ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar cJf.
BUDGET=${BUDGET:-540} CARRY=v1 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
link_source_dir
use_torch_libraries
t backend 60 $C/bin/kvtier_cuda_backend_test
t parity 60 $C/bin/kvtier_cuda_parity_test
t cudnn 60 $C/bin/kvtier_cuda_cudnn_test
t prefill 90 $C/bin/kvtier_cuda_prefill_test
t memory 60 $C/bin/kvtier_cuda_memory_test
t moe 40 $C/bin/kvtier_cuda_moe_test
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait; echo "[$(el) s] ceilings + model: $(tail -1 $R/mkmodel.txt)"
bench() {  # bench NAME ATTENTION(default|own) WORKLOADS [FLAGS...]
  local name=$1 a=$2 w=$3; shift 3
  [ "$(left)" -lt 70 ] && { echo "skip $name: out of time"; return; }
  local lim=$(( $(left) - 5 )); [ $lim -gt 150 ] && lim=150
  ( [ "$a" = own ] && export KVTIER_CUDA_PREFILL_ATTENTION=own
    timeout $lim $C/bin/kvtier bench --workload $w --model $M --ceilings $R/ceilings.txt \
      --tier-dir /tmp/kb/tiers --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 40 "$@" > $R/$name.txt 2>&1 )
  echo "[$(el) s] $name rc=$?"; grep -E "^W[0-9]+[a-z]* " $R/$name.txt | grep -vE "seed|\\$/M" | cut -c1-120 | head -14
  grep -ho '"compute_path": *"[^"]*"' $R/$name.json | sort -u | cut -c1-200; rm -rf /tmp/kb/tiers
}
bench w4-default default W4
bench w4-own own W4
bench w4-default-fp8kv default W4 --kv-dtype fp8
bench w6-default default W6
bench w6-own own W6
bench w3-default default W3
bench w8-default default W8
tar czf $OUT/v1.tgz -C /tmp r
