#!/usr/bin/env bash
# Call R1 (issues #41, #34): mixture-of-experts prefill with prompts of distinct tokens.
# kvtier_cuda_bench's prompts were one repeated token, whose rows stay identical through every
# layer and so route to the same top-k experts: its MoE prefill figures read a fraction of the
# weights a real prompt reads. Now random ids (KVTIER_BENCH_SAME_TOKENS=1: the old prompts).
# The backend's warm-up prefills likewise now spread their ids over the vocabulary.
#   (1) the backend against the CPU on the MoE presets (their warm-up runs the spread prompts);
#       the fp8 GEMVs' bits (the previous call's P3: one row of fp8 codes on the copy engine);
#   (2) kvtier_cuda_bench KVTIER_BENCH_PREFILL=1 on Qwen3-30B-A3B bf16 / fp8 and Mixtral-8x7B fp8
#       (fp8 KV), distinct tokens against KVTIER_BENCH_SAME_TOKENS=1;
#   (3) P3's A/B: Qwen3-30B-A3B fp8 W1 graph steps, the defaults against the one-row GEMV on
#       registers and against that and no L2 prefetch, three rounds in alternating order;
#   (4) `kvtier bench` W1 on a Qwen3-30B-A3B fp8 checkpoint: bf16, then fp8 weights + fp8 KV.
# Carry r1: scripts/pack-carry.sh r1 build/tests/backend_cuda/kvtier_cuda_{bench,fp8_test,backend_test}
#   build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-500} CARRY=r1 . bench/results/device-call-prelude.sh; link_source_dir
M=/dev/shm/qwen3-30b-a3b
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $M > $R/mkmodel-qwen3moe.txt 2>&1 &
mk=$!
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
t backend_moe 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*qwen3moe*:*mixtral*'
t fp8_gemv 40 $C/bin/kvtier_cuda_fp8_test --gtest_filter='*Gemv*'
prefill() {  # prefill NAME PRESET [ENV=VALUE...]
  local name=$1 preset=$2; shift 2
  [ "$(left)" -gt 150 ] || { echo "skip $name: out of time"; return; }
  env "$@" KVTIER_BENCH_PREFILL=1 timeout 60 $C/bin/kvtier_cuda_bench $preset > $R/prefill-$name.txt 2>&1
  echo "[$(el) s] $name rc=$? $(grep -E "prefill" $R/prefill-$name.txt | tr -s ' ' | cut -d' ' -f1-8 | tr '\n' ';' | cut -c1-300)"
}
prefill q-bf16 qwen3-30b-a3b
prefill q-bf16-same qwen3-30b-a3b KVTIER_BENCH_SAME_TOKENS=1
prefill q-fp8 qwen3-30b-a3b KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8
prefill m-fp8 mixtral-8x7b KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8
prefill m-fp8-same mixtral-8x7b KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8 KVTIER_BENCH_SAME_TOKENS=1
tar czf $OUT/r1.tgz -C /tmp r
quick() {  # quick NAME [ENV=VALUE...]
  local name=$1; shift
  [ "$(left)" -gt 150 ] || { echo "skip $name: out of time"; return; }
  env "$@" KVTIER_BENCH_QUICK=w1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 timeout 30 \
    $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/quick-$name.txt 2>&1
  echo "[$(el) s] $name rc=$? $(grep -E "W1 decode.*graph" $R/quick-$name.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2 3; do
  order="def regs off"; [ $((round % 2)) = 0 ] && order="off regs def"
  for v in $order; do
    case $v in
      def) quick q-fp8-def-$round ;;
      regs) quick q-fp8-regs-$round KVTIER_CUDA_GEMV_BULK=0 ;;
      off) quick q-fp8-off-$round KVTIER_CUDA_GEMV_BULK=0 KVTIER_CUDA_L2_PREFETCH=0 ;;
    esac
  done
done
tar czf $OUT/r1.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-qwen3moe.txt | cut -c1-100)"
kbench qwen3moe-bf16 W1 --weight-dtype bf16
kbench qwen3moe-fp8 W1 --weight-dtype fp8 --kv-dtype fp8
tar czf $OUT/r1.tgz -C /tmp r
