#!/usr/bin/env bash
# Call C3: (1) bench/micro/fp8_activation_rows.cu (the spread GatedMulFp8 kernels and the
# hardware E4M3 conversion, checked over every float) and kvtier_cuda_fp8_test; (2) the W1/W2
# graph decode steps in fp8 weights + fp8 KV and in bf16 (KVTIER_BENCH_QUICK), main before
# this change (kvtier_cuda_bench_old, commit 7b5792b's build) against main with it, alternating,
# twice each; (3) issue #41's Qwen3-30B-A3B W1 step kernel by kernel (ncu, clocks left alone,
# gpu__time_duration.sum; KVTIER_BENCH_PROFILE=w1 on device-generated bf16 weights) and its
# graph step; (4) Mixtral 8x7B in fp8 weights (compressed-tensors per channel) + fp8 KV end to
# end: W1 and W2 through `kvtier bench` with the ceilings of this call.
# Carry c3: scripts/device-carry.sh .carry/c3 <main's kvtier, libkvtier_cuda.so, kvtier_cuda_bench,
#   kvtier_cuda_fp8_test, fp8_rows_new>; kvtier_cuda_bench_old; ../shared/anchors; COMMIT;
#   SOURCE_DIR; strip; tar cJf.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=c3 . bench/results/device-call-prelude.sh
use_torch_libraries
X=/tmp/kb/mixtral-8x7b-fp8
mkdir -p /tmp/kb
$C/bin/kvtier mkmodel --preset mixtral-8x7b --fp8 ct-channel --out $X > $R/mkmodel-mixtral.txt 2>&1 &
mk=$!
timeout 90 $C/bin/fp8_rows_new > $R/fp8_rows_new.txt 2>&1; echo "[$(el) s] fp8_rows_new rc=$?"
cut -c1-140 $R/fp8_rows_new.txt
t fp8_test 60 $C/bin/kvtier_cuda_fp8_test
tar czf $OUT/c3.tgz -C /tmp r
quick() {  # quick NAME BINARY DTYPE
  KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$3 KVTIER_BENCH_KV_DTYPE=$3 timeout 60 $C/bin/$2 > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W1 decode.*graph|W2 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-90 | tr '\n' ' ')"
}
for round in 1 2; do
  for d in fp8 bf16; do
    if [ $round = 1 ]; then quick old-$d-1 kvtier_cuda_bench_old $d; quick new-$d-1 kvtier_cuda_bench $d
    else quick new-$d-2 kvtier_cuda_bench $d; quick old-$d-2 kvtier_cuda_bench_old $d; fi
  done
done
tar czf $OUT/c3.tgz -C /tmp r
KVTIER_BENCH_QUICK=1 timeout 100 $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/quick-qwen3moe.txt 2>&1
echo "[$(el) s] quick qwen3moe rc=$?"; grep -E "W1|W2" $R/quick-qwen3moe.txt | cut -c1-150
KVTIER_BENCH_PROFILE=w1 timeout 150 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
  --csv $C/bin/kvtier_cuda_bench qwen3-30b-a3b > $R/ncu-qwen3moe-w1.csv 2> $R/ncu-qwen3moe-w1.err
echo "[$(el) s] ncu qwen3moe rc=$? kernels $(grep -c gpu__time_duration $R/ncu-qwen3moe-w1.csv)"
python3 bench/results/2026-12-06-step-profile/summarize-ncu.py $R/ncu-qwen3moe-w1.csv 2>&1 | head -24
tar czf $OUT/c3.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel mixtral rc=$? $(tail -1 $R/mkmodel-mixtral.txt | cut -c1-120)"
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings rc=$?"
for w in W1 W2; do
  [ "$(left)" -lt 60 ] && { echo "skip mixtral $w: out of time"; continue; }
  timeout $(( $(left) - 8 )) $C/bin/kvtier bench --workload $w --model $X --kv-dtype fp8 --ceilings $R/ceilings.txt \
    --json $R/mixtral-fp8-$w.json --commit "$(cat $C/COMMIT)" --time-limit 60 > $R/mixtral-fp8-$w.txt 2>&1
  echo "[$(el) s] mixtral $w rc=$?"; grep -E "^W[12] " $R/mixtral-fp8-$w.txt | cut -c1-150
done
tar czf $OUT/c3.tgz -C /tmp r
