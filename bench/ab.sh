#!/usr/bin/env bash
# Same-machine A/B of two builds through `kvtier bench`, old first in odd rounds and new first
# in even ones, so that neither the machine's spread nor a drift (a disk filling, a cache
# warming) reads as a change. Carry both builds:
#   CARRY/old/{bin/kvtier,lib/...} and CARRY/new/{bin/kvtier,lib/...} (scripts/device-carry.sh
#   each; the CUDA module sits in lib/, found next to bin/ by the library).
# usage: bench/ab.sh CARRY OUT [WORKLOADS] [ROUNDS]     (default W1,W2; 2 rounds)
# W6 in WORKLOADS also runs W6b (a new process over W6's disk file) right after it, per build.
# Writes OUT/ab-{old,new}-ROUND.json (+ -w6b), and prints each run's table lines.
# env: MODEL_DIR (default /tmp/kvtier-bench/llama3-8b; written once by the new build),
#      TIME_LIMIT per workload in s (default 90),
#      BENCH_FLAGS more `kvtier bench` flags for both builds (e.g. W6c's --remote-kv-url).
set -uo pipefail
carry=${1:?usage: bench/ab.sh CARRY OUT [WORKLOADS] [ROUNDS]}
out=${2:?usage: bench/ab.sh CARRY OUT [WORKLOADS] [ROUNDS]}
workloads=${3:-W1,W2}
rounds=${4:-2}
model=${MODEL_DIR:-/tmp/kvtier-bench/llama3-8b}
mkdir -p "$out"
if [ ! -f "$model/config.json" ]; then
  LD_LIBRARY_PATH="$carry/new/lib:/usr/local/cuda/lib64" "$carry/new/bin/kvtier" mkmodel --preset llama3-8b \
    --out "$model" > "$out/mkmodel.txt" 2>&1 || { echo "ab: mkmodel failed"; cat "$out/mkmodel.txt"; exit 1; }
fi
for round in $(seq 1 "$rounds"); do
  order="old new"
  [ $((round % 2)) -eq 0 ] && order="new old"
  for which in $order; do
    export LD_LIBRARY_PATH="$carry/$which/lib:$carry/new/lib:/usr/local/cuda/lib64"
    bin="$carry/$which/bin/kvtier"
    tiers="$(dirname "$model")/tiers-$which"
    rm -rf "$tiers"
    "$bin" bench --workload "$workloads" --model "$model" --json "$out/ab-$which-$round.json" \
      --time-limit "${TIME_LIMIT:-90}" --tier-dir "$tiers" ${BENCH_FLAGS:-} 2>&1 | grep -E "^W[0-9]" | sed "s/^/$which $round: /"
    case ",$workloads," in
      *,W6,*)
        "$bin" bench --workload W6b --model "$model" --json "$out/ab-$which-$round-w6b.json" \
          --time-limit "${TIME_LIMIT:-90}" --tier-dir "$tiers" 2>&1 | grep -E "^W6b" | sed "s/^/$which $round: /" ;;
    esac
    rm -rf "$tiers"
  done
done
