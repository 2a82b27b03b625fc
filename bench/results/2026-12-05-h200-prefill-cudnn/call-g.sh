#!/usr/bin/env bash
# Call G: which cuDNN the GPU machine has and whether its fused attention builds on kvtier's
# prefill shape, and how fast (bench/micro/cudnn_sdpa.cu); the CUDA backend's tests at the
# Gemma 2/3 branch (cuda-gemma 1da6ff2): every model case against the CPU backend (Gemma, Phi-3,
# the others), and the prefill kernel tests.
# Carry: scripts/device-carry.sh .carry/g <cuda-gemma build>/src/backend/cuda/libkvtier_cuda.so
#   .../kvtier_cuda_{backend,prefill}_test /tmp/micro/cudnn_sdpa; COMMIT; strip; tar cJf.
CARRY=g . bench/results/device-call-prelude.sh
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' > $R/cudnn.txt 2>&1
cat $R/cudnn.txt
TORCH_CUDNN=$(python3 -c 'import nvidia.cudnn,os;print(os.path.join(list(nvidia.cudnn.__path__)[0],"lib"))')
LD_LIBRARY_PATH=$TORCH_CUDNN:$LD_LIBRARY_PATH timeout 150 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa rc=$?"; grep -E "^cuDNN|RESULT|built in" $R/cudnn_sdpa.txt | cut -c1-170 | head -40
mkdir -p $R/tests
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
t backend 240 $C/bin/kvtier_cuda_backend_test
t prefill 90 $C/bin/kvtier_cuda_prefill_test
grep -hE "Failure" -A6 $R/tests/*.txt | head -40
grep -hE "^\[(tiny|small)" $R/tests/backend.txt | cut -c1-140 | head -40
tar czf $OUT/g.tgz -C /tmp r
