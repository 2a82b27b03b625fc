#!/usr/bin/env bash
# Call Z: which forms of the composite attention graph cuDNN offers engines for (the probe's
# sweep, with cuDNN's own warnings logged), the cuDNN tests and the backend's cuDNN prefill on
# the library's default form; the backend model cases that missed their bounds on the first
# H200 run, repeated on fresh random checkpoints to see the spread (default switches, then
# the wgmma scored prefill); the family and MoE goldens in bf16 and fp16; then W4 (32k) bf16
# with KVTIER_CUDA_PREFILL_ATTENTION=own and =cudnn, ceilings of the same call.
# Carry: ninja kvtier_cli kvtier_cuda kvtier_cuda_{backend,cudnn,parity}_test; the probe
#   (nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc bench/micro/cudnn_sdpa.cu
#   src/backend/cuda/cudnn_graph.cc -lcudnn -o /tmp/micro/cudnn_sdpa);
#   scripts/device-carry.sh .carry/z build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/kvtier_cuda_{backend,cudnn,parity}_test /tmp/micro/cudnn_sdpa;
#   anchors, COMMIT, SOURCE_DIR (pwd); strip --strip-debug; tar cJf.
CARRY=z . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
link_source_dir
use_torch_libraries
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$R/cudnn-log.txt timeout 150 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa rc=$?"; grep -E "^cuDNN|^FORM|RESULT" $R/cudnn_sdpa.txt | cut -c1-200 | head -70
grep -iE "not supported|unsupported|reason|fail" $R/cudnn-log.txt | sort | uniq -c | sort -rn | cut -c1-220 | head -12
t cudnn 60 $C/bin/kvtier_cuda_cudnn_test
t backend-cudnn 60 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Cudnn*'
F='Presets/*gemma*:Presets/*phi3*:Presets/*mixtral*:Presets/*qwen3moe*'
t backend-rep 120 $C/bin/kvtier_cuda_backend_test --gtest_filter="$F" --gtest_repeat=4
KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1 t backend-rep-wgmma 60 $C/bin/kvtier_cuda_backend_test \
  --gtest_filter='Presets/*gemma*' --gtest_repeat=3
t parity 90 $C/bin/kvtier_cuda_parity_test
grep -hE "Failure" -A4 $R/tests/cudnn.txt $R/tests/backend-cudnn.txt | head -30
for f in backend-rep backend-rep-wgmma; do echo "== $f: max relative error per case over the repeats"
  grep -hE "^\[(tiny|small)-" $R/tests/$f.txt | sed -E 's/ logits rows [0-9]+, max relative error ([0-9.e-]+), argmax mismatches ([0-9]+)(, ([a-z]+) attention)?.*/ \4 \1 \2/' |
    awk '{k=$0; sub(/ [^ ]+ [^ ]+$/,"",k); e=$(NF-1); if (!(k in m) || e>m[k]) m[k]=e; n[k]++} END {for (k in m) printf "%-48s n=%d max %s\n", k, n[k], m[k]}' | sort
done
grep -hE "^\[cuda parity\]" $R/tests/parity.txt | cut -c1-120
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
w4_prefill_attention own cudnn
tar czf $OUT/z.tgz -C /tmp r
