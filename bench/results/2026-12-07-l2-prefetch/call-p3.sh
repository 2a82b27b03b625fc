#!/usr/bin/env bash
# Call P3 (issue #41): P2's default for one row of fp8 codes ran gemv_kernel.cuh's register
# kernel, not the copy engine (LaunchDecodeGemv applied its own default again); fixed, checked
# here: (1) the fp8 GEMVs' bits; (2) Qwen3-30B-A3B fp8 W1 graph steps (KVTIER_BENCH_QUICK=w1),
# the defaults against the one-row GEMV on registers (KVTIER_CUDA_GEMV_BULK=0) and against both
# that and no L2 prefetch, four rounds in alternating order; (3) `kvtier bench` W1 on a
# Qwen3-30B-A3B fp8 checkpoint, fp8 weights + fp8 KV, with this call's ceilings.
# Carry p3: scripts/pack-carry.sh p3 build/tests/backend_cuda/kvtier_cuda_{bench,fp8_test} build/tools/kvtier/kvtier
#   build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-420} CARRY=p3 . bench/results/device-call-prelude.sh; link_source_dir
Q=/dev/shm/qwen3-30b-a3b
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1 &
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
t fp8_gemv_test 40 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*Gemv*'
quick() {  # quick NAME [ENV=VALUE...]
  local name=$1; shift
  [ "$(left)" -gt 120 ] || { echo "skip $name: out of time"; return; }
  env "$@" KVTIER_BENCH_QUICK=w1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 timeout 30 \
    $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/quick-$name.txt 2>&1
  local rc=$?
  echo "[$(el) s] $name rc=$rc $(grep -E "W1 decode.*graph" $R/quick-$name.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2 3 4; do
  order="def regs off"; [ $((round % 2)) = 0 ] && order="off regs def"
  for v in $order; do
    case $v in
      def) quick q-fp8-def-$round ;;
      regs) quick q-fp8-regs-$round KVTIER_CUDA_GEMV_BULK=0 ;;
      off) quick q-fp8-off-$round KVTIER_CUDA_GEMV_BULK=0 KVTIER_CUDA_L2_PREFETCH=0 ;;
    esac
  done
done
tar czf $OUT/p3.tgz -C /tmp r
wait; echo "[$(el) s] $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
[ "$(left)" -gt 50 ] && {
  timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1 --model $Q --weight-dtype fp8 --kv-dtype fp8 \
    --ceilings $R/ceilings.txt --json $R/qwen3moe-fp8.json --commit "$(cat $C/COMMIT)" --time-limit 30 \
    > $R/qwen3moe-fp8.txt 2>&1
  echo "[$(el) s] qwen3moe-fp8 rc=$?"; grep -E "^W1 " $R/qwen3moe-fp8.txt | cut -c1-110; }
tar czf $OUT/p3.tgz -C /tmp r
