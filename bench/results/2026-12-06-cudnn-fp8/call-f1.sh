#!/usr/bin/env bash
# Call F1: does cuDNN's fused attention take kvtier's prefill chunk in fp8 (issue #37), and how
# fast against the library's bf16 graph (bench/micro/cudnn_sdpa_fp8.cu): the build-only sweep
# of every fp8 form, then each form that built checked and timed in its own process.
# Carry f1: scripts/pack-carry.sh f1 /tmp/f8/cudnn_sdpa_fp8 (built by the line atop the .cu).
rm -rf /tmp/r
BUDGET=${BUDGET:-400} CARRY=${CARRY:-f1} . bench/results/device-call-prelude.sh
use_torch_libraries
timeout 120 $C/bin/cudnn_sdpa_fp8 > $R/sweep.txt 2>&1; echo "[$(el) s] sweep rc=$?"
grep "^FORM" $R/sweep.txt | cut -c1-160
tar czf $OUT/f1.tgz -C /tmp r
for i in $(grep "^FORM" $R/sweep.txt | grep BUILT | awk '{print $2}'); do
  [ "$(left)" -lt 40 ] && { echo "skip form $i: out of time"; continue; }
  timeout 90 $C/bin/cudnn_sdpa_fp8 $i > $R/form-$i.txt 2>&1; echo "[$(el) s] form $i rc=$?"
  grep RESULT $R/form-$i.txt | cut -c1-260
  tar czf $OUT/f1.tgz -C /tmp r
done
