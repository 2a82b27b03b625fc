#!/usr/bin/env bash
# Call S4 (prepared; issue #34, W2 fp8 decode): the TMA pipeline's tuning in whole W2 steps,
# where call S3 measured only 128 code bytes a row at lookaheads 2-4 and the whole ring. The
# trace (s3/tests/trace.txt) put 256 bytes a row about 3% ahead a layer in isolation, and
# lookahead 6 level with 4. Carry: build-s3.sh's (f is main). Llama-3-8B graph steps
# (KVTIER_BENCH_QUICK, fp8 weights + fp8 KV) for KVTIER_SKINNY_TMA=ROW,256,1,LOOKAHEAD:
# 128 at 4 (the default), 5, 6; 256 at 2, 3 and the whole ring (0); one order, then the reverse.
# Then the W8A8 ncu profiles call S2 did not reach (the o and gate_up projections of a W2 fp8
# step), if time is left.
# First, the trace with the finish's parts (arriving at split tiles, adding partials, storing
# the output) at 128 and 256 bytes a row, the whole ring and lookahead 4.
rm -rf /tmp/r
BUDGET=${BUDGET:-420} CARRY=${CARRY:-s3} . bench/results/device-call-prelude.sh
KVTIER_SKINNY_BENCH_ROWS=64 KVTIER_SKINNY_TRACE_LOOKAHEAD=0,4 t trace 60 $C/bin/kvtier_cuda_skinny_test_f \
  --gtest_also_run_disabled_tests --gtest_filter='SkinnyGemmTrace.*'
grep -E "^(shape|qkv|o|gate_up|down) " $R/tests/trace.txt
quick() {  # quick NAME ROW LOOKAHEAD
  KVTIER_SKINNY_TMA=$2,256,1,$3 KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 timeout 60 \
    $C/bin/kvtier_cuda_bench_f llama3-8b > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W2 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="128:4 128:5 128:6 256:2 256:3 256:0"
  [ $round = 2 ] && order="256:0 256:3 256:2 128:6 128:5 128:4"
  for rl in $order; do
    [ "$(left)" -gt 20 ] && quick r${rl%:*}-l${rl#*:}-$round ${rl%:*} ${rl#*:}
  done
  tar czf $OUT/s4.tgz -C /tmp r
done
full() {  # full NAME SKIP: one W8A8 projection of a Llama-3-8B W2 fp8 step, ncu's full sections
  [ "$(left)" -lt 60 ] && { echo "skip $1: out of time"; return; }
  KVTIER_BENCH_PROFILE=w2 KVTIER_BENCH_WEIGHT_DTYPE=fp8 timeout $(( $(left) > 130 ? 120 : $(left) - 10 )) \
    ncu --clock-control none --profile-from-start off --set full -k regex:SkinnyTmaKernel --launch-skip $2 \
    --launch-count 1 $C/bin/kvtier_cuda_bench_f llama3-8b > $R/ncu-full-$1.txt 2>&1
  echo "[$(el) s] ncu $1 rc=$?"
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy" $R/ncu-full-$1.txt | head -6
  tar czf $OUT/s4.tgz -C /tmp r
}
full w8a8-o-w2 1
full w8a8-gateup-w2 2
