#!/usr/bin/env bash
# The main job: installs what is needed, builds, writes a small random-weight model and
# generates several sequences at once under a small KV budget, printing per-tier stats.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build" -DKVTIER_BUILD_TESTS=OFF
kvtier="$root/build/tools/kvtier/kvtier"
model="$root/build/demo-model"
"$kvtier" mkmodel --preset small-llama --seed 1 --out "$model"
"$kvtier" inspect --model "$model"
echo
echo "== 6 sequences at once, 24 new tokens each, device-tier KV budget of 40 blocks =="
"$kvtier" run --model "$model" --backend auto --block-tokens 16 --gpu-kv-bytes 2560KiB \
  --max-tokens 24 --ignore-eos --max-tokens-per-step 64 \
  --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 \
  --prompt-ids 21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48 \
  --prompt-ids 50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75 \
  --prompt-ids 80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100,101,102,103 \
  --prompt-ids 110,111,112,113,114,115,116,117,118,119,120,121,122,123,124,125,126,127,128,129 \
  --prompt-ids 130,131,132,133,134,135,136,137,138,139,140,141,142,143,144,145,146,147,148,149
