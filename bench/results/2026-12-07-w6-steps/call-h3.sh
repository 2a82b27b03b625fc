#!/usr/bin/env bash
# Call H3 (issue #37: W6's batch of 128, all first tokens in <= 0.4 s on an H200; 0.62 s on an
# H100 in ../2026-12-05-h100-cudnn-default): where W6's prefill steps go.
#  1. kvtier_cuda_backend_test's GGUF test (its CPU reference now the blocks' values in fp32).
#  2. kvtier_cuda_bench KVTIER_BENCH_PREFILL=1 (random Llama-3-8B, bf16): W6's prefill step
#     (16 prompts x 128 own tokens over a cached 4,096-token prefix) beside one 2,048-token
#     prompt from position 0 and W4's chunk at 30,000: the backend's step without the engine.
#  3. `kvtier bench` W6 with its step wall times (prefill_step_s) until all first tokens.
#  4. ncu over one W6 prefill step (KVTIER_BENCH_PROFILE=w6p): time per kernel.
#  5. (issue #41, MoE prefill) bench/micro/cudnn_moe.cu: cuDNN's MoE grouped matmul and a loop
#     of cuBLAS GEMMs on Qwen3-30B-A3B's and Mixtral's expert shapes at 64-2,048 tokens.
# Carry h3: bash bench/results/2026-12-07-w6-steps/build-h3.sh. Sourced after F2/G1 on a warm
# machine it reuses their checkpoint ($M) and ceilings.
BUDGET=${BUDGET:-300} CARRY=${CARRY:-h3} . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
[ -f $M/config.json ] || { mkdir -p /tmp/kb; $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 & }
link_source_dir
t backend_gguf 60 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Gguf*'
grep -h "gguf blocks" $R/tests/backend_gguf.txt
KVTIER_BENCH_PREFILL=1 timeout 90 $C/bin/kvtier_cuda_bench llama3-8b > $R/prefill-steps.txt 2>&1
echo "[$(el) s] prefill steps rc=$?"; grep -E "prefill" $R/prefill-steps.txt
tar czf $OUT/h3.tgz -C /tmp r
wait; [ -s $R/ceilings.txt ] || timeout 60 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
use_torch_libraries > /dev/null
mkdir -p /tmp/kb/tiers
kbench w6 W6 --tier-dir /tmp/kb/tiers
python3 -c "import json;w=json.load(open('$R/w6.json'))['workloads']['W6']['phases']['batch_128'];s=w.get('prefill_step_s',[]);print(len(s),'steps to all first, ms:',' '.join('%.1f'%(x*1e3) for x in s))" 2>&1 | cut -c1-400
tar czf $OUT/h3.tgz -C /tmp r
moe_probe() {
  [ "$(left)" -lt 30 ] && { echo "skip cudnn_moe: out of time"; return; }
  timeout $(( $(left) - 10 )) $C/bin/cudnn_moe > $R/cudnn_moe.txt 2>&1
  echo "[$(el) s] cudnn_moe rc=$?"; grep -E "^cuDNN|RESULT" $R/cudnn_moe.txt | cut -c1-160
  tar czf $OUT/h3.tgz -C /tmp r
}
moe_probe
[ "$(left)" -lt 60 ] && { echo "skip ncu: out of time"; exit 0; }
KVTIER_BENCH_PROFILE=w6p timeout $(( $(left) - 10 )) ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum --csv $C/bin/kvtier_cuda_bench > $R/ncu-w6p.csv 2> $R/ncu-w6p.err
echo "[$(el) s] ncu w6p rc=$? kernels $(grep -c gpu__time_duration $R/ncu-w6p.csv)"
python3 bench/results/2026-12-06-step-profile/summarize-ncu.py $R/ncu-w6p.csv 2>&1 | head -30
tar czf $OUT/h3.tgz -C /tmp r
