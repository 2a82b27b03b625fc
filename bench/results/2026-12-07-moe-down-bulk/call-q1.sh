#!/usr/bin/env bash
# Call Q1 (issue #41): Qwen3-30B-A3B W1 end to end through `kvtier bench` with this call's
# ceilings (bf16 weights from an fp8 checkpoint, as ../2026-12-06-moe-decode), the copy-engine
# down+combine and GEMV on (the defaults) and off (KVTIER_CUDA_GEMV_BULK=0
# KVTIER_CUDA_MOE_DOWN_BULK=0), each in its own process.
# Carry q1: scripts/pack-carry.sh q1 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-330} CARRY=q1 . bench/results/device-call-prelude.sh; link_source_dir
Q=/dev/shm/qwen3-30b-a3b
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1 &
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
wait; echo "[$(el) s] $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
w1() {  # w1 NAME [ENV=VALUE...]
  local name=$1; shift
  [ "$(left)" -lt 50 ] && { echo "skip $name: out of time"; return; }
  env "$@" timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1 --model $Q --weight-dtype bf16 \
    --ceilings $R/ceilings.txt --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 30 > $R/$name.txt 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W1 " $R/$name.txt | cut -c1-110
}
w1 qwen3moe-bulk
tar czf $OUT/q1.tgz -C /tmp r
w1 qwen3moe-registers KVTIER_CUDA_GEMV_BULK=0 KVTIER_CUDA_MOE_DOWN_BULK=0
tar czf $OUT/q1.tgz -C /tmp r
