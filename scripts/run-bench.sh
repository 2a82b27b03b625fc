#!/usr/bin/env bash
# What the device call runs for `kvtier bench`: the ceilings and the seed baseline
# (../shared/anchors, copied into the carry folder because ../shared does not travel),
# then every workload, all in one call on the GPU machine and — as a service would run
# them — in ONE `kvtier bench` process: the main workloads, then the fp16, fp8, fp8 + fp8 KV
# and long-context passes (`--pass`). Only W6b runs in a second process, since what it
# measures is a restart. Writes into OUT_DIR:
#   bench.json (the results), bench-<pass>.json per pass, bench.txt (tables + log),
#   ceilings.txt, baseline.txt, lib_kernels.txt.
# The random Llama-3-8B checkpoint is written on the machine's local disk while the
# Python anchors use the GPU (the write needs only CPU and disk).
# usage: scripts/run-bench.sh CARRY_DIR OUT_DIR   (CARRY_DIR from scripts/device-carry.sh,
#        plus CARRY_DIR/anchors/*.py and CARRY_DIR/COMMIT)
# env: WORKLOADS (default all), TIME_LIMIT per workload in s (default 90),
#      SKIP_ANCHORS=1 to skip ceilings.py / hf_baseline.py, MODEL_DIR (default /tmp/kvtier-bench/llama3-8b),
#      TIER_TIME_LIMIT for W5/W6/W6b/W6c in s (default 120), WORKLOADS with W6c: CARRY_DIR/redis
#      from scripts/carry-redis.sh gives it its Redis server, TIER_DIR (default MODEL_DIR/../tiers),
#      The passes, each a `--pass` of the same process (bench-<name>.json):
#      F16_WORKLOADS (default W1,W2; "none" to skip): pass f16, on an fp16 checkpoint
#      (weights, activations and KV held in fp16).
#      FP8_WORKLOADS (default W1,W2; "none" to skip): pass fp8, fp8 weights.
#      FP8KV_WORKLOADS (default W1,W2; "none" to skip): pass fp8-kv8, fp8 weights and fp8 KV.
#      LONG_WORKLOADS (default none; e.g. W8): pass long, long-context workloads (KV streamed
#      from the host tier, docs/LONG_CONTEXT.md) on the bf16 checkpoint.
#      LONG_FP8_WORKLOADS (default none; e.g. W8): pass long-fp8, with fp8 weights and fp8 KV
#      (the whole 128k context on the device).
#      BENCH_FLAGS: more flags for the main `kvtier bench` call (e.g. --sampler-controls,
#      --json-schema FILE --tokenizer DIR), word-split.
set -uo pipefail
carry=${1:?usage: scripts/run-bench.sh CARRY_DIR OUT_DIR}
out=${2:?usage: scripts/run-bench.sh CARRY_DIR OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
kvtier="$carry/bin/kvtier"
model=${MODEL_DIR:-/tmp/kvtier-bench/llama3-8b}
commit=$(cat "$carry/COMMIT" 2>/dev/null || echo unknown)
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/machine.txt"

# 1. Checkpoints in the background (CPU + disk only): the bf16 one, and the fp16 one of pass f16.
f16_workloads=${F16_WORKLOADS:-W1,W2}
model16="${model}-f16"
( if [ ! -f "$model/config.json" ]; then
    "$kvtier" mkmodel --preset llama3-8b --out "$model" > "$out/mkmodel.txt" 2>&1
  fi
  if [ "$f16_workloads" != none ] && [ ! -f "$model16/config.json" ]; then
    "$kvtier" mkmodel --preset llama3-8b --dtype fp16 --out "$model16" > "$out/mkmodel-f16.txt" 2>&1
  fi ) &
mk_pid=$!

# 2. Anchors on the GPU meanwhile.
: > "$out/ceilings.txt"; : > "$out/baseline.txt"; : > "$out/lib_kernels.txt"
if [ "${SKIP_ANCHORS:-0}" != 1 ]; then
  timeout 120 python3 "$carry/anchors/ceilings.py" > "$out/ceilings.txt" 2>&1 || echo "ceilings.py failed rc=$?" >> "$out/ceilings.txt"
  echo "anchors: ceilings done at $(( $(date +%s) - t0 )) s"
  timeout 120 python3 "$carry/anchors/hf_baseline.py" W1 > "$out/baseline.txt" 2>&1 || echo "hf W1 failed rc=$?" >> "$out/baseline.txt"
  echo "anchors: hf W1 done at $(( $(date +%s) - t0 )) s"
  timeout 120 python3 "$carry/anchors/hf_baseline.py" W2 --batch 64 >> "$out/baseline.txt" 2>&1 || echo "hf W2 failed rc=$?" >> "$out/baseline.txt"
  echo "anchors: hf W2 done at $(( $(date +%s) - t0 )) s"
  # What cuBLAS / cuBLASLt fp8 / cuDNN attention reach on the model's shapes: the fp8 GEMM
  # ceiling of the fp8 passes (--lib-kernels), and the libraries' figures beside ours.
  timeout 240 python3 "$carry/anchors/lib_kernels.py" > "$out/lib_kernels.txt" 2>&1 || echo "lib_kernels.py failed rc=$?" >> "$out/lib_kernels.txt"
  echo "anchors: lib_kernels done at $(( $(date +%s) - t0 )) s"
fi
lib_args=()
[ -s "$out/lib_kernels.txt" ] && lib_args=(--lib-kernels "$out/lib_kernels.txt")
wait "$mk_pid"
echo "checkpoint ready at $(( $(date +%s) - t0 )) s"; tail -3 "$out/mkmodel.txt" 2>/dev/null

# W6c's Redis: Debian's redis-server carried in CARRY_DIR/redis (scripts/carry-redis.sh),
# on a loopback port, persistence off; stopped at the end. io-threads 2: Redis writes the
# replies of the tier's parallel lookup connections on two threads (Redis threads them
# only while at least twice as many clients wait for their replies).
remote_args=()
case ",${WORKLOADS:-all}," in
  *,W6c,*)
    if [ -x "$carry/redis/bin/redis-server" ]; then
      LD_LIBRARY_PATH="$carry/redis/lib" "$carry/redis/bin/redis-server" --port 6390 --bind 127.0.0.1 --save '' \
        --io-threads 2 --appendonly no --daemonize yes --dir "$out" --pidfile "$out/redis.pid" --logfile "$out/redis.log"
      remote_args=(--remote-kv-url redis://127.0.0.1:6390)
    else
      echo "run-bench: no $carry/redis (scripts/carry-redis.sh): W6c runs without its Redis phases"
    fi ;;
esac

# 3. The workloads and the passes, in one process. W5/W6 put their disk tiers on the machine's
#    local disk next to the checkpoint; W6b runs in a NEW process over W6's disk file (hits
#    after a restart) and is merged into bench.json (workloads.W6b, table, missed_targets).
tiers=${TIER_DIR:-$(dirname "$model")/tiers}
passes=()
[ "$f16_workloads" != none ] && passes+=(--pass "f16:$f16_workloads:model=$model16")
[ "${FP8_WORKLOADS:-W1,W2}" != none ] && passes+=(--pass "fp8:${FP8_WORKLOADS:-W1,W2}:weight=fp8")
[ "${FP8KV_WORKLOADS:-W1,W2}" != none ] && passes+=(--pass "fp8-kv8:${FP8KV_WORKLOADS:-W1,W2}:weight=fp8:kv=fp8")
[ "${LONG_WORKLOADS:-none}" != none ] && passes+=(--pass "long:$LONG_WORKLOADS")
[ "${LONG_FP8_WORKLOADS:-none}" != none ] && passes+=(--pass "long-fp8:$LONG_FP8_WORKLOADS:weight=fp8:kv=fp8")
"$kvtier" bench --workload "${WORKLOADS:-all}" --model "$model" --make-model "$(dirname "$model")" --ceilings "$out/ceilings.txt" \
  --baseline "$out/baseline.txt" --json "$out/bench.json" --commit "$commit" \
  --time-limit "${TIME_LIMIT:-90}" --tier-dir "$tiers" --tier-time-limit "${TIER_TIME_LIMIT:-120}" ${BENCH_FLAGS:-} \
  "${lib_args[@]}" "${remote_args[@]}" "${passes[@]}" 2>&1 | tee "$out/bench.txt"
[ -f "$out/redis.pid" ] && kill "$(cat "$out/redis.pid")"
case ",${WORKLOADS:-all}," in
  *,all,*|*,W6,*)
    echo "run-bench: W6b (new process) at $(( $(date +%s) - t0 )) s"
    "$kvtier" bench --workload W6b --model "$model" --json "$out/bench-w6b.json" --commit "$commit" \
      --time-limit "${TIME_LIMIT:-90}" --tier-dir "$tiers" --tier-time-limit "${TIER_TIME_LIMIT:-120}" 2>&1 | tee -a "$out/bench.txt"
    python3 - "$out/bench.json" "$out/bench-w6b.json" <<'PY' || echo "run-bench: W6b merge failed"
import json, sys
main, extra = (json.load(open(p)) for p in sys.argv[1:3])
main["workloads"].update(extra.get("workloads", {}))
main["table"] = main.get("table", []) + extra.get("table", [])
main["missed_targets"] = main.get("missed_targets", []) + extra.get("missed_targets", [])
# W6b against recomputing: its first token after the restart (disk tier, load-or-recompute
# plan) over W6's first token with a prefix never seen, both one sequence on the same shape;
# only for a kvtier whose W6b does not measure its own recompute (ratio_restart_vs_recompute).
w6, w6b = main["workloads"].get("W6", {}), main["workloads"].get("W6b", {})
recompute, restart = w6.get("ttft_unseen_1seq_s"), w6b.get("ttft_cached_1seq_s")
if recompute and restart and "ratio_restart_vs_recompute" not in w6b:
    ratio = restart / recompute
    w6b["ratio_restart_vs_recompute"] = ratio
    row = {"workload": "W6b", "figure": "  TTFT after restart vs recompute (W6)", "unit": "x", "value": ratio,
           "hardware_limit": None, "ratio_to_limit": None, "seed_baseline": None, "ratio_to_baseline": None,
           "target": 0.75, "target_met": ratio <= 0.75, "note": "W6 recomputed in %.3f s" % recompute}
    main["table"].append(row)
    if ratio > 0.75:
        main["missed_targets"].append({"workload": "W6b", "figure": row["figure"], "value": ratio, "target": 0.75,
                                       "off_by": "%.1f%%" % (100 * (ratio / 0.75 - 1))})
json.dump(main, open(sys.argv[1], "w"), indent=2)
PY
    ;;
esac
rm -rf "$tiers"
echo "run-bench: done at $(( $(date +%s) - t0 )) s"
