#!/usr/bin/env bash
# The demo's two processes on the GPU (CUDA backend; host and disk tiers, the second finds
# the shared prefix on disk), with the idle writer: each run's stats as JSON, then the
# stats 1 s after its last step (kvtier run --json prints them at once; the idle writer's
# pumps are counted there).
set -u
mkdir -p /tmp/d "$OUT/r"; R=$OUT/r
tar xJf .carry/d.txz -C /tmp/d
C=/tmp/d/d; K=$C/bin/kvtier
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
cat $C/COMMIT > $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/machine.txt
prefix="Here are a few old sayings, quips and definitions, collected over many years by people who should have been working. "
run() {
  timeout 60 "$K" run --model models/demo --backend cuda --block-tokens 16 \
    --gpu-kv-bytes 640KiB --host-kv-bytes 2MiB --disk-kv-bytes 16MiB --disk-path /tmp/demo-kv.disk \
    --preemption swap --max-tokens 40 --temperature 0.5 --seed 7 --json \
    --prompt "${prefix}The meaning of life is" --prompt "${prefix}A computer is" \
    --prompt "${prefix}Never trust a man who" --prompt "${prefix}The best way to learn" \
    --prompt "${prefix}Love is" --prompt "${prefix}A programmer"
}
run > $R/run1.json 2> $R/run1.err; echo "run1 rc $?" >> $R/log.txt
run > $R/run2.json 2> $R/run2.err; echo "run2 rc $?" >> $R/log.txt
python3 - "$R" <<'PY' >> $R/log.txt
import json, sys
for n in (1, 2):
    s = json.load(open(f"{sys.argv[1]}/run{n}.json"))["stats"]
    print(n, "backend", s["backend"], "prefix_hits", s["prefix_hits"], "persisted", s["blocks_persisted"],
          "pending", s["pending_writes"], "idle_writer_pumps", s["idle_writer_pumps"], "io_errors", s["io_errors"])
PY
cat $R/log.txt
