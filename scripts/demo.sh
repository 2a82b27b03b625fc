#!/usr/bin/env bash
# The main job: installs what is needed, builds, and lets the small trained demo model that
# ships with kvtier (models/demo) continue six prompts at once under a KV budget far smaller
# than they need, so the tiers work: sequences are paused and swapped to host memory and
# back, the prompts' shared beginning is cached once, and a second process finds that
# beginning in the disk tier. Each sequence is one line, redrawn as it grows on a terminal
# (plain lines when piped); then the tiers and what the cache did.
#   scripts/demo.sh [--no-build] [extra kvtier run flags]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVTIER_DEMO_BUILD:-$root/build}
if [ "${1:-}" = --no-build ]; then
  shift
else
  "$root/scripts/install-deps.sh"
  "$root/scripts/build.sh" "$build" -DKVTIER_BUILD_TESTS=OFF
fi
kvtier="$build/tools/kvtier/kvtier"
disk="$build/demo-kv.disk"
rm -f "$disk" "$disk.index"

# The prompts share their first sentence (two 16-token blocks): it is computed once and
# reused by the others, and found on disk by the second process.
backend=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then backend=cuda; fi
prefix="Here are a few old sayings, quips and definitions, collected over many years by people who should have been working. "
run() {
  "$kvtier" run --model demo --backend "$backend" --block-tokens 16 \
    --gpu-kv-bytes 640KiB --host-kv-bytes 2MiB --disk-kv-bytes 16MiB --disk-path "$disk" \
    --preemption swap --max-tokens 40 --temperature 0.5 --seed 7 --live \
    --prompt "${prefix}The meaning of life is" --prompt "${prefix}A computer is" \
    --prompt "${prefix}Never trust a man who" --prompt "${prefix}The best way to learn" \
    --prompt "${prefix}Love is" --prompt "${prefix}A programmer" "$@"
}
echo "== kvtier demo ($backend backend): the demo model continues 6 prompts at once in a GPU tier far smaller than their KV =="
run "$@"
echo
echo "== a new process, same prompts, same disk file: the shared beginning comes from disk =="
run "$@"
