#!/usr/bin/env bash
# Call C6, asked for an H200 (issues #34 and #37 state their targets on one; an H100 came): main's kvtier (the
# gated product's spread and the hardware E4M3 conversion) on a random Llama-3-8B checkpoint,
# with this call's ceilings: W1,W2 in fp8 weights + fp8 KV, then W4 in bf16 and with fp8 KV,
# each in its own process, as the device time allows.
# Carry c6: scripts/device-carry.sh .carry/c6 <kvtier, libkvtier_cuda.so>; anchors; COMMIT.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=c6 . bench/results/device-call-prelude.sh
use_torch_libraries
M=/tmp/kb/llama3-8b
mkdir -p /tmp/kb
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(head -c 100 $R/ceilings.txt)"
bench() {  # bench NAME WORKLOADS FLAGS...
  local name=$1 w=$2; shift 2
  [ "$(left)" -lt 30 ] && { echo "skip $name: out of time"; return; }
  timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload $w --model $M "$@" --ceilings $R/ceilings.txt \
    --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 40 > $R/$name.txt 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W[0-9] " $R/$name.txt | cut -c1-120
  tar czf $OUT/c6.tgz -C /tmp r
}
bench w12-fp8 W1,W2 --weight-dtype fp8 --kv-dtype fp8
bench w4-bf16 W4
bench w4-fp8kv W4 --kv-dtype fp8
