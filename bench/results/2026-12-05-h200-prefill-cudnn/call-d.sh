#!/usr/bin/env bash
# Call D: which cuDNN the GPU machine has (torch's wheels), whether its fused attention builds on
# kvtier's prefill shape and how fast (bench/micro/cudnn_sdpa.cu); every CUDA test binary (Phi-3 on
# CUDA against the CPU backend among them; the memory test's Redis variant with a carried
# redis-server); the ceilings and lib_kernels; W4 (32k) bf16 and fp8 weights + fp8 KV with the
# prefill attention's default variant and variant 7 (two CTAs per SM), each in one process.
# Carry: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc bench/micro/cudnn_sdpa.cu
#   src/backend/cuda/cudnn_graph.cc
#   -lcudnn -o /tmp/micro/cudnn_sdpa; scripts/device-carry.sh .carry/d build/tools/kvtier/kvtier
#   build/src/backend/cuda/libkvtier_cuda.so build/tests/backend_cuda/*_test /tmp/micro/cudnn_sdpa;
#   scripts/carry-redis.sh .carry/d/redis; the anchors and COMMIT beside them; strip; tar cJf.
CARRY=d . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 ) &
MK=$!
python3 - > $R/cudnn.txt 2>&1 <<'PY'
import torch, os, glob
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
import nvidia.cudnn as c
d = list(c.__path__)[0]
print("cudnn dir", d)
for f in sorted(glob.glob(d + "/**", recursive=True)):
    if ".so" in f: print(f)
PY
head -1 $R/cudnn.txt
TORCH_CUDNN=$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(list(nvidia.cudnn.__path__)[0],"lib"))')
LD_LIBRARY_PATH=$TORCH_CUDNN:$LD_LIBRARY_PATH timeout 100 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa rc=$?"; grep -vE "^\s*$" $R/cudnn_sdpa.txt | tail -25 | cut -c1-160
mkdir -p $R/tests
# The memory test starts its own Redis server from PATH.
export PATH=$C/redis/bin:$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$C/redis/lib:$C/redis/hiredis
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
for b in backend fp8 skinny host_kv memory kernels decode prefill sampling plan; do t $b 120 $C/bin/kvtier_cuda_${b}_test; done
grep -hE "Failure" -A5 $R/tests/*.txt | head -30
grep -E "prefill-attention" $R/tests/prefill.txt | cut -c20-140 | tail -12
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
timeout 150 python3 $C/anchors/lib_kernels.py > $R/lib_kernels.txt 2>&1
wait $MK; echo "[$(el) s] anchors + checkpoint"
for v in 0 7; do
  [ $(el) -gt 480 ] && { echo "skipping W4 variant $v: out of time"; continue; }
  KVTIER_CUDA_PREFILL_VARIANT=$v timeout $(( 585 - $(el) )) $C/bin/kvtier bench --workload W4 --model $M \
    --ceilings $R/ceilings.txt --lib-kernels $R/lib_kernels.txt --json $R/bench-v$v.json --commit "$(cat $C/COMMIT)" \
    --time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" > $R/bench-v$v.txt 2>&1
  echo "[$(el) s] bench variant $v rc=$?"
done
grep -E "^W4 .*prefill" $R/bench-v0.txt $R/bench-v7.txt | cut -c1-150
tar czf $OUT/d.tgz -C /tmp r
