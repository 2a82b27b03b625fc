#!/usr/bin/env bash
# Call A: where a W9 step goes. The decode attention kernel alone on W9 shapes (256-512 rows
# at 1,000-2,000 positions, bf16 and fp8 KV, a sweep of splits); whole backend steps of W9's
# kinds (decode at 128/256/512 rows, mixed decode + prompt steps of 2,048 tokens, a 2 x 1,024
# prefill) in fp8 weights + fp8 KV and in bf16; then W9 fp8 + fp8 KV end to end with the
# ceilings, on the commit's kernels (the wgmma prefill attention included).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/a.txz -C /tmp/c
C=/tmp/c/a; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
timeout 30 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings"
KVTIER_DECODE_BENCH=1 timeout 90 $C/bin/kvtier_cuda_bench > $R/decode_attention.txt 2>&1
echo "[$(el) s] decode attention rc=$?"; grep -E "W9|W2" $R/decode_attention.txt | cut -c1-190
KVTIER_BENCH_W9=128:1500,256:1500,512:1500 KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8 \
  timeout 120 $C/bin/kvtier_cuda_bench > $R/steps_fp8.txt 2>&1
echo "[$(el) s] fp8 steps rc=$?"; cat $R/steps_fp8.txt
KVTIER_BENCH_W9=256:1500,512:1500 timeout 120 $C/bin/kvtier_cuda_bench > $R/steps_bf16.txt 2>&1
echo "[$(el) s] bf16 steps rc=$?"; cat $R/steps_bf16.txt
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout $(( 570 - $(el) )) $C/bin/kvtier bench --workload W9 --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 150 --weight-dtype fp8 --kv-dtype fp8 > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W9 " $R/bench.txt
python3 - $R/bench.json <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["workloads"]["W9"]
print({k: w.get(k) for k in ["ok", "error", "wall_s", "all_first_token_s", "decode_s", "decode_tokens", "steps", "output_tok_s",
      "mean_output_tokens_per_step", "host_schedule_s_per_step", "preemptions"]})
PY
tar czf $OUT/a.tgz -C /tmp r
