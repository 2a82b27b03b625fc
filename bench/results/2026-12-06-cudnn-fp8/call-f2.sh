#!/usr/bin/env bash
# Call F2 (issue #37): cuDNN's fp8 attention with its output in E4M3 (F1 found no engine for
# the graph with O in bf16).
#  1. kvtier_cuda_cudnn_test on the GPU: the fp8 inputs' and output's kernels bit for bit
#     against the host, CudnnPrefill with fp8_attention against the host reference.
#  2. W4 (fp8 KV) and W8 (fp8 weights + fp8 KV) with cuda_prefill_fp8_attention 1 and 0, each
#     in its own process; kvtier_fp8_quality with fp8 attention on then off; W8 again in the
#     reverse order; W4 in bf16 beside them (#37: fp8 prefill no slower than bf16).
# Carry f2: bash bench/results/2026-12-06-cudnn-fp8/build-f2.sh
rm -rf /tmp/r
BUDGET=${BUDGET:-420} CARRY=${CARRY:-f2} . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
use_torch_libraries
t cudnn 150 $C/bin/kvtier_cuda_cudnn_test
grep "fp8 attention, chunk" $R/tests/cudnn.txt | sort -t, -k2 | tail -6
tar czf $OUT/f2.tgz -C /tmp r
wait; timeout 60 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings + model: $(tail -1 $R/mkmodel.txt | cut -c1-100)"
KVTIER_CUDA_PREFILL_FP8_ATTENTION=1 kbench w4-fp8kv-fp8att W4 --kv-dtype fp8
KVTIER_CUDA_PREFILL_FP8_ATTENTION=0 kbench w4-fp8kv-bf16att W4 --kv-dtype fp8
tar czf $OUT/f2.tgz -C /tmp r
KVTIER_CUDA_PREFILL_FP8_ATTENTION=1 kbench w8-fp8-fp8att-1 W8 --weight-dtype fp8 --kv-dtype fp8
KVTIER_CUDA_PREFILL_FP8_ATTENTION=0 kbench w8-fp8-bf16att-1 W8 --weight-dtype fp8 --kv-dtype fp8
grep -ho '"prefill_attention": *"[^"]*"' $R/w*.json | sort | uniq -c | cut -c1-300
tar czf $OUT/f2.tgz -C /tmp r
quality() {  # quality FP8_ATTENTION: kvtier_fp8_quality on /tmp/m8 (byte tokens)
  [ "$(left)" -lt 70 ] && { echo "skip quality $1: out of time"; return; }
  [ -d /tmp/m8 ] || $C/bin/kvtier mkmodel --preset llama3-8b --tokenizer bytes --out /tmp/m8 > $R/mkmodel-bytes.txt 2>&1
  timeout $(( $(left) - 10 )) $C/bin/kvtier_fp8_quality --model /tmp/m8 --text models/demo/heldout.txt --backend cuda \
    --window 1024 --max-positions 1023 --cuda-prefill-cudnn 2 --cuda-prefill-fp8-attention $1 \
    --json $R/quality-fp8att$1.json > $R/quality-fp8att$1.txt 2>&1
  echo "[$(el) s] quality fp8 attention $1 rc=$?"; grep -E "fp8_kv|kl_mean|^fp8" $R/quality-fp8att$1.txt | head -8
  tar czf $OUT/f2.tgz -C /tmp r
}
quality 1
kbench w4-bf16 W4
quality 0
KVTIER_CUDA_PREFILL_FP8_ATTENTION=0 kbench w8-fp8-bf16att-2 W8 --weight-dtype fp8 --kv-dtype fp8
KVTIER_CUDA_PREFILL_FP8_ATTENTION=1 kbench w8-fp8-fp8att-2 W8 --weight-dtype fp8 --kv-dtype fp8
KVTIER_CUDA_PREFILL_FP8_ATTENTION=1 kbench w4-fp8kv-fp8att-2 W4 --kv-dtype fp8
tar czf $OUT/f2.tgz -C /tmp r
