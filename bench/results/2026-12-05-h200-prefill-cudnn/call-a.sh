#!/usr/bin/env bash
# Call A: prefill attention variant 7 (64-position tiles, two stages, two CTAs per SM) against
# the default, in the prefill test's timing sweep and in W4 (32k) bf16 and fp8 weights + fp8 KV,
# each variant in one process with the ceilings in the call; and which cuDNN the GPU machine has
# (torch's wheels), whether its fused attention builds and how fast (bench/micro/cudnn_sdpa.cu),
# and Phi-3 on CUDA against the CPU backend.
# Carry: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations bench/micro/cudnn_sdpa.cu -lcudnn
#   -o /tmp/micro/cudnn_sdpa; scripts/device-carry.sh .carry/a build/tools/kvtier/kvtier
#   build/src/backend/cuda/libkvtier_cuda.so build/tests/backend_cuda/kvtier_cuda_{prefill,backend}_test
#   /tmp/micro/cudnn_sdpa; the anchors and COMMIT beside them; strip; tar cJf.
CARRY=a . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 ) &
MK=$!
python3 - > $R/cudnn.txt 2>&1 <<'PY'
import torch, os, glob
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
import nvidia.cudnn as c
d = os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0]
print("cudnn dir", d)
for f in sorted(glob.glob(d + "/**", recursive=True)):
    if f.endswith((".h", ".so", ".so.9")) or ".so." in f: print(f)
try:
    import cudnn; print("cudnn-frontend python", cudnn.backend_version(), cudnn.__file__)
except Exception as e: print("no cudnn frontend python:", e)
PY
head -3 $R/cudnn.txt
# cuDNN's fused attention on the prefill shapes (bench/micro/cudnn_sdpa.cu), with torch's cuDNN.
TORCH_CUDNN=$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(list(nvidia.cudnn.__path__)[0],"lib"))')
LD_LIBRARY_PATH=$TORCH_CUDNN:$LD_LIBRARY_PATH timeout 120 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa rc=$?"; grep -E "^cuDNN|RESULT" $R/cudnn_sdpa.txt
# Phi-3 on CUDA against the CPU backend (fused projections, LongRoPE).
timeout 120 $C/bin/kvtier_cuda_backend_test --gtest_filter='*phi3*:*tiny_llama*' > $R/backend_test.txt 2>&1
echo "[$(el) s] backend test rc=$?: $(grep -cE '^\[       OK \]' $R/backend_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/backend_test.txt | cut -c1-100 | tr '\n' ' ')"
grep -E "^\[tiny-phi3" $R/backend_test.txt
timeout 150 $C/bin/kvtier_cuda_prefill_test > $R/prefill_test.txt 2>&1
echo "[$(el) s] prefill test rc=$?: $(grep -cE '^\[       OK \]' $R/prefill_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/prefill_test.txt | cut -c1-100 | tr '\n' ' ')"
grep -E "prefill-attention" $R/prefill_test.txt | cut -c20-140 | tail -20
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
timeout 150 python3 $C/anchors/lib_kernels.py > $R/lib_kernels.txt 2>&1
wait $MK; echo "[$(el) s] anchors + checkpoint"
for v in 0 7; do
  KVTIER_CUDA_PREFILL_VARIANT=$v timeout 120 $C/bin/kvtier bench --workload W4 --model $M \
    --ceilings $R/ceilings.txt --lib-kernels $R/lib_kernels.txt --json $R/bench-v$v.json --commit "$(cat $C/COMMIT)" \
    --time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" > $R/bench-v$v.txt 2>&1
  echo "[$(el) s] bench variant $v rc=$?"
done
grep -E "^W4 .*prefill" $R/bench-v0.txt $R/bench-v7.txt | cut -c1-150
tar czf $OUT/a.tgz -C /tmp r
