#!/usr/bin/env bash
# Call R1 (issues #41, #34): mixture-of-experts prefill, measured with prompts that route like
# real ones, and the experts on the grouped skinny kernel (MoeTile::kSkinny, moe_skinny.h).
# kvtier_cuda_bench's prompts were one repeated token, whose rows stay identical through every
# layer and so all route to the same top-k experts: its MoE prefill figures read a fraction of
# the weights a real prompt reads. They are random ids now (KVTIER_BENCH_SAME_TOKENS=1: the old
# prompts); the backend's warm-up prefills spread their ids too.
#   (1) kvtier_cuda_skinny_test: the skinny kernel (changed: its tiles come from TileSpan) and
#       its grouped form against double-precision references; kvtier_cuda_moe_test (the skinny
#       path against the CPU backend); the backend on the MoE presets (warm-up prompts spread);
#   (2) kvtier_cuda_moe_bench qwen3 / mixtral: every path at 1 to 2,048 rows, skinny included;
#   (3) kvtier_cuda_bench KVTIER_BENCH_PREFILL=1: Qwen3-30B-A3B bf16 and fp8 (fp8 KV), Mixtral-8x7B
#       fp8 (fp8 KV), KVTIER_CUDA_MOE_SKINNY 0 against 1; Qwen3 bf16 with the old prompts;
#   (4) the decode batches' skinny kernel unchanged in speed: Llama-3-8B W1/W2 graph steps
#       (KVTIER_BENCH_QUICK=1) of this build against 78ab6e1's (kvtier_cuda_bench_a), bf16 and
#       fp8 weights, two rounds in alternating order.
# Carry r1: scripts/pack-carry.sh r1 build/tests/backend_cuda/kvtier_cuda_{bench,skinny_test,moe_test,moe_bench}
#   build/tests/backend_cuda/kvtier_cuda_backend_test /work/old/build/tests/backend_cuda/kvtier_cuda_bench=kvtier_cuda_bench_a
#   build/src/backend/cuda/libkvtier_cuda.so
rm -rf /tmp/r
BUDGET=${BUDGET:-570} CARRY=r1 . bench/results/device-call-prelude.sh; link_source_dir
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
t skinny 100 $C/bin/kvtier_cuda_skinny_test
t moe 120 $C/bin/kvtier_cuda_moe_test
t backend_moe 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*qwen3moe*:*mixtral*'
tar czf $OUT/r1.tgz -C /tmp r
for shape in qwen3 mixtral; do
  [ "$(left)" -gt 200 ] || { echo "skip moe_bench $shape: out of time"; continue; }
  timeout 90 $C/bin/kvtier_cuda_moe_bench $shape > $R/moe_bench_$shape.txt 2>&1
  echo "[$(el) s] moe_bench $shape rc=$?"; grep -E "rows +(512|2048) tile (auto|64x64|cublas|grouped|skinny)" $R/moe_bench_$shape.txt | cut -c1-120
done
tar czf $OUT/r1.tgz -C /tmp r
prefill() {  # prefill NAME PRESET [ENV=VALUE...]
  local name=$1 preset=$2; shift 2
  [ "$(left)" -gt 60 ] || { echo "skip $name: out of time"; return; }
  env "$@" KVTIER_BENCH_PREFILL=1 timeout 45 $C/bin/kvtier_cuda_bench $preset > $R/prefill-$name.txt 2>&1
  echo "[$(el) s] $name rc=$? $(grep -E "prefill" $R/prefill-$name.txt | tr -s ' ' | cut -d' ' -f1-8 | tr '\n' ';' | cut -c1-300)"
}
FP8="KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8"
prefill q-bf16-tiles qwen3-30b-a3b KVTIER_CUDA_MOE_SKINNY=0
prefill q-bf16-skinny qwen3-30b-a3b KVTIER_CUDA_MOE_SKINNY=1
prefill q-fp8-tiles qwen3-30b-a3b $FP8 KVTIER_CUDA_MOE_SKINNY=0
prefill q-fp8-skinny qwen3-30b-a3b $FP8 KVTIER_CUDA_MOE_SKINNY=1
prefill m-fp8-library mixtral-8x7b $FP8 KVTIER_CUDA_MOE_SKINNY=0
prefill m-fp8-skinny mixtral-8x7b $FP8 KVTIER_CUDA_MOE_SKINNY=1
prefill q-bf16-same qwen3-30b-a3b KVTIER_BENCH_SAME_TOKENS=1 KVTIER_CUDA_MOE_SKINNY=0
tar czf $OUT/r1.tgz -C /tmp r
for round in 1 2; do
  for w in bf16 fp8; do
    order="a b"; [ $round = 2 ] && order="b a"
    for v in $order; do
      prog=$C/bin/kvtier_cuda_bench; [ $v = a ] && prog=$C/bin/kvtier_cuda_bench_a
      quick_step l-$w-$v-$round $prog llama3-8b KVTIER_BENCH_WEIGHT_DTYPE=$w
    done
  done
done
tar czf $OUT/r1.tgz -C /tmp r
