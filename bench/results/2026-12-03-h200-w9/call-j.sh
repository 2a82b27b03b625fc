#!/usr/bin/env bash
# Call J: W9 (512 requests of 1,000 prompt + 1,000 output tokens, all at once, the whole H200)
# in one kvtier bench process: bf16 weights and KV, then the fp8 + fp8 KV pass; ceilings in the
# same call; GPU memory polled from outside every 0.5 s.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/j.txz -C /tmp/c
C=/tmp/c/j; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
timeout 25 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
( while true; do echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 0.5; done ) > $R/poll.txt 2>&1 &
POLL=$!
timeout $(( 570 - $(el) )) $C/bin/kvtier bench --workload W9 --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 200 --pass fp8-kv8:W9:weight=fp8:kv=fp8 > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
kill $POLL
grep -E "^W9 " $R/bench.txt
python3 - $R/bench.json $R/bench-fp8-kv8.json <<'PY'
import json, sys
for p in sys.argv[1:]:
    try: w = json.load(open(p))["workloads"]["W9"]
    except Exception as e: print(p, e); continue
    print(p.split('/')[-1], {k: w.get(k) for k in ["ok", "error", "wall_s", "steps", "generated", "output_tok_s",
          "mean_output_tokens_per_step", "host_schedule_s_per_step", "host_schedule_share_of_step", "preemptions"]})
PY
gzip $R/poll.txt
tar czf $OUT/j.tgz -C /tmp r
