#!/usr/bin/env bash
# Call D: the saturated-server workloads on call C's binaries, one process with the ceilings:
# W9 (512 x 1,000 / 1,000) in bf16, then W9, W9a (1,024 x 128 / 128) and W9b (256 x 2,048 /
# 2,048) in fp8 weights + fp8 KV (the pass TensorRT-LLM's published figures compare with).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/c.txz -C /tmp/c
C=/tmp/c/c; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
M=/tmp/kb/llama3-8b
( [ -e $M.ready ] || { $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready; } ) &
timeout 30 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings rc=$?"
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout $(( 575 - $(el) )) $C/bin/kvtier bench --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 150 --workload W9 --pass "fp8-kv8:W9,W9a,W9b:weight=fp8:kv=fp8" \
  > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W9" $R/bench.txt | cut -c1-200
for f in $R/bench*.json; do
python3 - $f <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k, w in d["workloads"].items():
    print(sys.argv[1].split("/")[-1], k, {x: w.get(x) for x in ["ok", "error", "requests", "wall_s", "output_tok_s", "all_first_token_s",
          "decode_s", "steps", "mean_output_tokens_per_step", "host_schedule_s_per_step", "preemptions", "peak_batch"]})
PY
done
tar czf $OUT/d.tgz -C /tmp r
