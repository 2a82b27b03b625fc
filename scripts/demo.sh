#!/usr/bin/env bash
# The main job: installs what is needed, builds, writes a small random-weight model with a
# byte-level tokenizer, and generates six sequences at once under a KV budget far smaller
# than they need, so the tiers work: sequences are swapped to host and disk and back,
# shared prompt prefixes are reused, and a second process finds the prefix on disk.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build" -DKVTIER_BUILD_TESTS=OFF
kvtier="$root/build/tools/kvtier/kvtier"
model="$root/build/demo-model"
disk="$root/build/demo-kv.disk"
rm -f "$disk" "$disk.index"
"$kvtier" mkmodel --force --preset small-llama --vocab 258 --tokenizer bytes --seed 1 --out "$model"
"$kvtier" inspect --model "$model"

prefix="kvtier keeps the KV cache in three tiers: GPU, pinned host memory and disk. "
run() {
  "$kvtier" run --model "$model" --backend auto --block-tokens 16 \
    --gpu-kv-bytes 512KiB --host-kv-bytes 256KiB --disk-kv-bytes 4MiB --disk-path "$disk" \
    --preemption swap --max-tokens 48 --ignore-eos --max-tokens-per-step 96 \
    --prompt "${prefix}Question one?" --prompt "${prefix}Question two?" \
    --prompt "${prefix}Question three?" --prompt "${prefix}Question four?" \
    --prompt "${prefix}Question five?" --prompt "${prefix}Question six?" "$@"
}
echo
echo "== 6 sequences at once; device tier 16 blocks (they need ~50): swaps to host and disk =="
run
echo
echo "== a new process over the same disk file: the shared prefix is found on disk =="
run
