# Sourced by final.sh: $C (merged build), $COMMON, $R, $M, t(), log(), left().
B=$C/bin
log "tests"
t host_kv_test 60 $B/kvtier_cuda_host_kv_test
t fp8_test 60 $B/kvtier_cuda_fp8_test
t skinny_test 30 $B/kvtier_cuda_skinny_test
t backend_test 100 $B/kvtier_cuda_backend_test --gtest_filter='-*ModuleEntryPoint*'
while [ ! -e $M.ready ]; do sleep 1; done; log "model ready"
log "run-bench (anchors, W1 W2 W6 W6c W6b, fp8, fp8+fp8 KV, W8 bf16, W8 fp8+fp8)"
WORKLOADS=W1,W2,W6,W6c F16_WORKLOADS=none FP8_WORKLOADS=W1,W2 FP8KV_WORKLOADS=W1,W2 LONG_WORKLOADS=W8 LONG_FP8_WORKLOADS=W8 \
  TIME_LIMIT=90 TIER_TIME_LIMIT=90 MODEL_DIR=$M timeout $(( $(left) - 100 )) bash $C/run-bench.sh $C $R/bench > $R/run-bench.log 2>&1
log "run-bench rc=$?"
grep -E "^(W1|W2|W6|W6b|W6c|W8) " $R/run-bench.log | head -80
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 25 )) python3 $COMMON/anchors/hf_baseline.py W8 --prompt 131008 --gen 64 --cache offloaded --cap-gib 24 > $R/hf_baseline_w8.txt 2>&1
  log "hf W8 rc=$?"; tail -2 $R/hf_baseline_w8.txt
fi
if [ "$(left)" -gt 30 ]; then
  timeout 12 $B/kvtier_host_kv_gather_bench --blocks 2048 --kinds loads,batch --loads 8 --ctas 132 --split > $R/gather_bench.txt 2>&1; log "gather bench rc=$?"
  KVTIER_SKINNY_BENCH_ROWS=16,32,64 timeout 12 $B/kvtier_cuda_skinny_test --gtest_also_run_disabled_tests --gtest_filter='SkinnyGemmBench.*' > $R/skinny_bench.txt 2>&1; log "skinny bench rc=$?"
fi
