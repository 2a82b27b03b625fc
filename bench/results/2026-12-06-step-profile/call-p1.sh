#!/usr/bin/env bash
# Call P1: where a decode step goes, kernel by kernel (issue #34). ncu (clocks left alone, one
# metric: gpu__time_duration.sum) over one graph decode step of kvtier_cuda_bench's
# KVTIER_BENCH_PROFILE cases on random Llama-3-8B weights: W2 (64 rows at 640 positions) in fp8
# weights + fp8 KV and in bf16, W1 (1 row at 600) in fp8 weights + fp8 KV and in bf16; then the
# graph step times of the same cases without the profiler (KVTIER_BENCH_QUICK), and the ceilings.
# Where call A (../2026-12-06-moe-decode/call-a.sh) left its Qwen3-30B-A3B checkpoint on this
# machine: W2 in bf16 and W1, W2 in fp8 weights + fp8 KV on it (the MoE tile pick at 64 rows).
# On an H200 (issue #37's targets are an H200's), then W4 in bf16 and fp8 KV, W6 and W8 on a
# random Llama-3-8B checkpoint, each in its own process, as time allows.
# Carry p1: scripts/device-carry.sh .carry/p1 <kvtier_cuda_bench, kvtier, libkvtier_cuda.so>;
#   ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar cJf.
rm -rf /tmp/r
BUDGET=${BUDGET:-570} CARRY=p1 . bench/results/device-call-prelude.sh
use_torch_libraries
M=/tmp/kb/llama3-8b
H200=0; grep -q H200 $R/machine.txt && H200=1
Q=/tmp/kb/qwen3-30b-a3b
[ $H200 = 1 ] && [ ! -d $Q ] && { mkdir -p /tmp/kb; $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 & }
prof() {  # prof NAME CASE WEIGHT KV
  KVTIER_BENCH_PROFILE=$2 KVTIER_BENCH_WEIGHT_DTYPE=$3 KVTIER_BENCH_KV_DTYPE=$4 timeout $(( $(left) - 10 )) \
    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
    $C/bin/kvtier_cuda_bench > $R/ncu-$1.csv 2> $R/ncu-$1.err
  echo "[$(el) s] ncu $1 rc=$? kernels $(grep -c gpu__time_duration $R/ncu-$1.csv)"
  tar czf $OUT/p1.tgz -C /tmp r
}
prof w2-fp8 w2 fp8 fp8
prof w2-bf16 w2 bf16 bf16
prof w1-fp8 w1 fp8 fp8
prof w1-bf16 w1 bf16 bf16
for d in fp8 bf16; do
  KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$d KVTIER_BENCH_KV_DTYPE=$d timeout $(( $(left) - 10 )) \
    $C/bin/kvtier_cuda_bench > $R/quick-$d.txt 2>&1
  echo "[$(el) s] quick $d rc=$?"; grep -iE "W1|W2" $R/quick-$d.txt | cut -c1-150
done
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings rc=$?"
tar czf $OUT/p1.tgz -C /tmp r
wait
bench() {  # bench NAME WORKLOADS [FLAGS...]
  local name=$1 w=$2; shift 2
  [ "$(left)" -lt 60 ] && { echo "skip $name: out of time"; return; }
  local lim=$(( $(left) - 5 )); [ $lim -gt 150 ] && lim=150
  timeout $lim $C/bin/kvtier bench --workload $w --model $M --ceilings $R/ceilings.txt \
    --tier-dir /tmp/kb/tiers --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 40 "$@" > $R/$name.txt 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W[0-9]+[a-z]* " $R/$name.txt | grep -vE "seed|\\$/M" | cut -c1-120 | head -8
  rm -rf /tmp/kb/tiers; tar czf $OUT/p1.tgz -C /tmp r
}
if [ -f $Q/config.json ] && [ "$(left)" -gt 200 ]; then
  timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W2 --model $Q --weight-dtype bf16 \
    --pass fp8:W1,W2:weight=fp8:kv=fp8 --ceilings $R/ceilings.txt --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" \
    --time-limit 60 > $R/qwen3moe.txt 2>&1
  echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W[12] " $R/qwen3moe.txt | cut -c1-160 | head -12
  rm -rf $Q; tar czf $OUT/p1.tgz -C /tmp r
fi
if [ $H200 = 1 ] && [ -f $M/config.json ]; then
  bench w4 W4; bench w4-fp8kv W4 --kv-dtype fp8; bench w6 W6; bench w8 W8
fi
