#!/usr/bin/env bash
# Call F3 (issues #41, #34): Mixtral 8x7B fp8 weights + fp8 KV end to end after F1/F2, W1 and W2
# through `kvtier bench` with this call's ceilings (W2: #41's "W2 decode reported with its
# limit"), with the fp8 checkpoint loaded a row at a time (RequantizeFp8Rows, one pinned host
# buffer): F1's load took 200 s. First the backend's presets against the CPU backend (fp8
# checkpoints per tensor, per channel and blockwise through the new loader) and the MoE tests
# (Fp8Gemm's varying row counts now launched on the bucket's algorithm without a check per count).
# Carry f3: scripts/pack-carry.sh f3 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/kvtier_cuda_backend_test build/tests/backend_cuda/kvtier_cuda_moe_test
rm -rf /tmp/r
BUDGET=${BUDGET:-585} CARRY=f3 . bench/results/device-call-prelude.sh; link_source_dir
X=/dev/shm/mixtral-8x7b-fp8
$C/bin/kvtier mkmodel --preset mixtral-8x7b --fp8 ct-channel --out $X > $R/mkmodel-mixtral.txt 2>&1 &
mk=$!
# SKIP_TESTS=1: the tests ran in an earlier call of the same binaries (call B1 of
# ../2026-12-07-moe-down-bulk): the whole budget goes to the bench.
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t moe 90 $C/bin/kvtier_cuda_moe_test
  t backend 120 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Preset*'
fi
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
tar czf $OUT/f3.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-mixtral.txt | cut -c1-100)"
[ "$(left)" -gt 60 ] && { timeout $(( $(left) - 8 )) $C/bin/kvtier bench --workload W1,W2 --model $X --weight-dtype fp8 \
  --kv-dtype fp8 --ceilings $R/ceilings.txt --json $R/mixtral-fp8.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 > $R/mixtral-fp8.txt 2>&1
  echo "[$(el) s] mixtral W1,W2 rc=$?"; grep -E "^W[12] |weights 43" $R/mixtral-fp8.txt | cut -c1-150; }
tar czf $OUT/f3.tgz -C /tmp r
