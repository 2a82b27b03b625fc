#!/usr/bin/env bash
# Call F3q (the short form of F3 when little device time is left): the MoE tests and the
# backend's presets against the CPU backend (fp8 checkpoints through the row-at-a-time loader,
# the bucketed fp8 GEMMs without a check per count), then Qwen3-30B-A3B's fp8 checkpoint
# (mkmodel into /dev/shm) loaded in bf16 (DequantizeFp8Row) and in fp8 (RequantizeFp8Rows)
# through `kvtier bench --workload W1` with this call's ceilings: the load times against
# ../2026-12-05-h100-cudnn-default/m1 (63-64 s bf16, 67-69 s fp8, the whole-matrix loader).
# Carry f3: as call-f3.sh.
rm -rf /tmp/r
BUDGET=${BUDGET:-300} CARRY=f3 . bench/results/device-call-prelude.sh; link_source_dir
Q=/dev/shm/qwen3-30b-a3b-fp8
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1 &
mk=$!
t moe 60 $C/bin/kvtier_cuda_moe_test
t backend 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Preset*'
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
tar czf $OUT/f3q.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
[ "$(left)" -gt 40 ] && { timeout $(( $(left) - 6 )) $C/bin/kvtier bench --workload W1 --model $Q --weight-dtype bf16 \
  --pass fp8:W1:weight=fp8:kv=fp8 --ceilings $R/ceilings.txt --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" \
  --time-limit 40 > $R/qwen3moe.txt 2>&1
  echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W1 |weights 29" $R/qwen3moe.txt | cut -c1-150; }
tar czf $OUT/f3q.tgz -C /tmp r
