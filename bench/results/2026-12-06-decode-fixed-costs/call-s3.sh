#!/usr/bin/env bash
# Call S3 (issue #34: W2 fp8 decode). Carry s3: build-s3.sh. The skinny finish with its scales
# loaded ahead (the tokens' once per call, a tile's columns as its steps begin) and the
# partials' loads overlapped (_f) against the finish and pipelines of 6c88a3a
# before (_a), and the TMA pipeline's lookahead (steps in flight per CTA, SkinnyTmaTuning):
# (1) the W8A8 trace again (SkinnyGemmTrace, 64 rows, code rows of 128 and 256 bytes, lookahead
# 0 = the whole ring, 2, 3, 4, 6); (2) kvtier_cuda_skinny_test (every pipeline against the CPU,
# lookaheads included); (3) Llama-3-8B graph steps (KVTIER_BENCH_QUICK: W1 and W2 decode,
# prefill) in fp8 weights + fp8 KV: a, f, f with lookahead 2, 3, 4 (KVTIER_SKINNY_TMA), then the
# reverse order; bf16 once each for a and f.
rm -rf /tmp/r
BUDGET=${BUDGET:-400} CARRY=s3 . bench/results/device-call-prelude.sh
link_source_dir
KVTIER_SKINNY_BENCH_ROWS=64 t trace 60 $C/bin/kvtier_cuda_skinny_test_f --gtest_also_run_disabled_tests \
  --gtest_filter='SkinnyGemmTrace.*'
grep -E "^(shape|qkv|o|gate_up|down) " $R/tests/trace.txt | head -90
t skinny_f 120 $C/bin/kvtier_cuda_skinny_test_f
tar czf $OUT/s3.tgz -C /tmp r
quick() {  # quick NAME VARIANT DTYPE [LOOKAHEAD]
  KVTIER_SKINNY_TMA=128,256,1,${4:-0} KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$3 timeout 60 \
    $C/bin/kvtier_cuda_bench_$2 llama3-8b > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W2 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="a:0 f:0 f:2 f:3 f:4"; [ $round = 2 ] && order="f:4 f:3 f:2 f:0 a:0"
  for vl in $order; do
    v=${vl%:*} l=${vl#*:}
    [ "$(left)" -gt 20 ] && quick fp8-$v-l$l-$round $v fp8 $l
  done
  tar czf $OUT/s3.tgz -C /tmp r
done
for v in a f; do [ "$(left)" -gt 20 ] && quick bf16-$v $v bf16; done
tar czf $OUT/s3.tgz -C /tmp r
