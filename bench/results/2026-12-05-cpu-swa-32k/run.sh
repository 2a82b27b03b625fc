#!/usr/bin/env bash
# Sliding-window KV layer groups end to end at 32k on the CPU backend: one Gemma-3-shaped
# random checkpoint (6 layers, 5 local : 1 global, window 1024), one 32,000-token prompt and 16
# greedy tokens, run three times by the kvtier CLI of this build:
#   grouped  --kv-layer-groups 1 with a 12 MiB device tier;
#   refused  --kv-layer-groups 0 with the same 12 MiB (a full-attention context needs 4x it);
#   full     --kv-layer-groups 0 with 64 MiB, the reference tokens.
# usage: bench/results/2026-12-05-cpu-swa-32k/run.sh BUILD_DIR OUT_DIR
set -euo pipefail
kvtier=${1:?build dir}/tools/kvtier/kvtier
out=${2:?out dir}
mkdir -p "$out"
"$kvtier" mkmodel --force --out "$out/model" --arch gemma3 --hidden 64 --layers 6 --heads 4 --kv-heads 1 \
  --head-dim 32 --intermediate 128 --vocab 512 --max-positions 40000 --tie-embeddings --sliding-window 1024 \
  --sliding-pattern 6 --query-pre-attn-scalar 32 --dtype bf16 --seed 7 > "$out/mkmodel.txt"
prompt=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(3, 500)) for _ in range(32000)))')
run() {  # name groups bytes
  local rc=0
  "$kvtier" run --model "$out/model" --backend cpu --prompt-ids "$prompt" --max-tokens 16 --ignore-eos \
    --prefix-cache 0 --kv-layer-groups "$2" --gpu-kv-bytes "$3" --json > "$out/$1.json" 2> "$out/$1.err" || rc=$?
  echo "$1: exit $rc"
}
run grouped 1 12MiB
run refused 0 12MiB
run full 0 64MiB
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
g = json.load(open(f"{out}/grouped.json"))
f = json.load(open(f"{out}/full.json"))
tg, tf = g["sequences"][0]["tokens"], f["sequences"][0]["tokens"]
print("grouped tokens:", tg)
print("full tokens:   ", tf)
print("identical:", tg == tf)
print("grouped kv_layer_groups:", g["stats"]["kv_layer_groups"])
PY
tail -1 "$out/refused.err"
