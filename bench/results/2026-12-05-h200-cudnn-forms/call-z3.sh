#!/usr/bin/env bash
# Call Z3: cuDNN's fused attention on the padded form (the chunk's sq and skv as device
# tensors, the matmuls' M, N and K overridden by them, padding masked), which lets one plan
# serve a bucket of key counts: the probe's sweep, then the padded forms and the frontend's
# unpadded one checked (on key rows rounded up to 64) and timed, each in its own process; the
# cuDNN tests and the backend's cuDNN prefill; the whole backend, fp8 and prefill tests and
# the goldens with the wgmma scored prefill on by default; then W4 (32k) bf16 with
# KVTIER_CUDA_PREFILL_ATTENTION=own and =cudnn.
# Carry: as call-z2.sh (carry z3).
CARRY=z3 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
link_source_dir
use_torch_libraries
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$R/cudnn-log.txt timeout 60 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa sweep rc=$?"; grep -E "^form [0-5]:|library default" $R/cudnn_sdpa.txt | cut -c1-160
for i in 3 1 5 9; do  # padded/stats/pbf16 (the library's), padded/nostats, padded/stats-mem, addsub/stats
  timeout 50 $C/bin/cudnn_sdpa $i > $R/cudnn_sdpa_$i.txt 2>&1
  echo "[$(el) s] form $i rc=$?"; grep -E "RESULT|illegal|error" $R/cudnn_sdpa_$i.txt | cut -c1-170 | head -8
done
t cudnn 60 $C/bin/kvtier_cuda_cudnn_test
t backend 90 $C/bin/kvtier_cuda_backend_test
# (the fp8 test ran with the scored wgmma instances in call X: call-x.sh, fp8-prefill)
t prefill 90 $C/bin/kvtier_cuda_prefill_test --gtest_filter='-*Timing*'
t parity 60 $C/bin/kvtier_cuda_parity_test
grep -hE "Failure" -A5 $R/tests/*.txt | head -40
grep -hE "^\[(tiny|small)-" $R/tests/backend.txt | grep -E "gemma|moe|mixtral|phi3" | cut -c1-150
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
w4_prefill_attention own cudnn
tar czf $OUT/z3.tgz -C /tmp r
