#!/usr/bin/env bash
# Call Z2: cuDNN's fused attention on the form call Z found it offers engines for (P in V's
# type, the frontend's mask, the softmax stats branch): the probe's sweep, then each built
# form checked and timed in a process of its own; the cuDNN tests and the backend's cuDNN
# prefill; the whole backend test and the goldens with the bounds set from call Z's draws
# (fixed seeds now); the Gemma cases and the Gemma-scored layer timing on the wgmma scored
# prefill; then W4 (32k) bf16 with KVTIER_CUDA_PREFILL_ATTENTION=own and =cudnn.
# Carry: as call-z.sh (carry z2), plus build/tests/backend_cuda/kvtier_cuda_prefill_test.
CARRY=z2 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
link_source_dir
use_torch_libraries
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$R/cudnn-log.txt timeout 60 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa sweep rc=$?"; grep -E "^form|library default|RESULT" $R/cudnn_sdpa.txt | cut -c1-160
for i in 3 1 9 5; do  # addsub/stats/pbf16 (the library's), addsub/nostats, offset/stats, addsub/stats-mem
  timeout 60 $C/bin/cudnn_sdpa $i > $R/cudnn_sdpa_$i.txt 2>&1
  echo "[$(el) s] form $i rc=$?"; grep -E "RESULT|illegal|error" $R/cudnn_sdpa_$i.txt | cut -c1-170 | head -8
done
t cudnn 60 $C/bin/kvtier_cuda_cudnn_test
t backend 90 $C/bin/kvtier_cuda_backend_test
t parity 60 $C/bin/kvtier_cuda_parity_test
KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1 t backend-wgmma 40 $C/bin/kvtier_cuda_backend_test --gtest_filter='Presets/*gemma*'
KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1 t window-timing 90 $C/bin/kvtier_cuda_prefill_test --gtest_filter='*PrefillWindowTiming*'
grep -hE "Failure" -A5 $R/tests/*.txt | head -40
grep -hE "^\[(tiny|small)-" $R/tests/backend.txt $R/tests/backend-wgmma.txt | cut -c1-150
grep -hE "^\[cuda parity\]" $R/tests/parity.txt | awk '{print $3, $4, $(NF-4), $(NF-3), $NF}' | sort -k3 | tail -8
grep -vE "^\[ RUN|^\[       OK|^$|^\[---" $R/tests/window-timing.txt | head -30
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
w4_prefill_attention own cudnn
tar czf $OUT/z2.tgz -C /tmp r
