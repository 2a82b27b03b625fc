#!/usr/bin/env bash
# Sliding-window KV layer groups end to end at 32k on the CUDA backend: one Gemma-3-shaped
# random checkpoint (26 layers, 5 local : 1 global, window 512, 4 query heads and 1 KV head of
# head_dim 128, bf16 weights and KV), one 32,000-token prompt and 16 greedy tokens, run three
# times by the kvtier CLI of this build, each in its own process:
#   grouped  --kv-layer-groups 1 with a 256 MiB device tier (GROUPED_BYTES sets another);
#   refused  --kv-layer-groups 0 with the same 256 MiB (a full-attention context needs 1.6 GiB);
#   full     --kv-layer-groups 0 with 2 GiB, the reference tokens.
# Each run's peak GPU memory is read from outside the process (nvidia-smi, every 100 ms).
# usage: run.sh KVTIER OUT_DIR
set -uo pipefail
kvtier=${1:?kvtier program}
out=${2:?out dir}
mkdir -p "$out"
"$kvtier" mkmodel --force --out "$out/model" --arch gemma3 --hidden 1024 --layers 26 --heads 4 --kv-heads 1 \
  --head-dim 128 --intermediate 4096 --vocab 8192 --max-positions 40000 --tie-embeddings --sliding-window 512 \
  --sliding-pattern 6 --query-pre-attn-scalar 128 --dtype bf16 --seed 7 > "$out/mkmodel.txt" 2>&1 || {
  echo "mkmodel failed"; cat "$out/mkmodel.txt"; exit 1; }
prompt=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(3, 1000)) for _ in range(32000)))')  # ids below 1000: the list stays under the 128 KiB a single argument may take
run() {  # name groups bytes
  local rc=0 peak=0 watcher
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.1; done ) \
    > "$out/$1.mem" 2>/dev/null &
  watcher=$!
  "$kvtier" run --model "$out/model" --backend cuda --prompt-ids "$prompt" --max-tokens 16 --ignore-eos \
    --prefix-cache 0 --kv-layer-groups "$2" --gpu-kv-bytes "$3" --json > "$out/$1.json" 2> "$out/$1.err" || rc=$?
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  peak=$(sort -n "$out/$1.mem" | tail -1)
  echo "$1: exit $rc, peak GPU memory used ${peak} MiB (whole GPU, nvidia-smi)"
}
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
echo "GPU memory used before the runs: ${base} MiB"
run grouped 1 "${GROUPED_BYTES:-256MiB}"
run refused 0 256MiB
run full 0 2GiB
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
g = json.load(open(f"{out}/grouped.json"))
f = json.load(open(f"{out}/full.json"))
tg, tf = g["sequences"][0]["tokens"], f["sequences"][0]["tokens"]
print("grouped tokens:", tg)
print("full tokens:   ", tf)
print("identical:", tg == tf)
print("grouped kv_layer_groups:", json.dumps(g["stats"].get("kv_layer_groups")))
for name, s in (("grouped", g), ("full", f)):
    st = s["stats"]
    print(name, json.dumps({k: st.get(k) for k in ("backend", "kv_dtype", "block_bytes", "block_tokens", "device_bytes_in_use",
                                                  "device_memory", "gpu_allocs_after_init", "time")})[:900])
PY
tail -2 "$out/refused.err"
