#!/usr/bin/env bash
# Call E: cuDNN's fused attention as kvtier's prefill attention (cuda_prefill_cudnn, branch
# cudnn-prefill): which cuDNN torch's wheel brings; the probe on the library's own graph code
# (bench/micro/cudnn_sdpa.cu: finalize status, error against an fp32 reference, speed and plan
# build time on W4's shapes); the cuDNN tests (loader, KvGather against a host gather,
# CudnnPrefill against the host reference for bf16 and fp8 KV, the backend against the CPU
# backend, the fallback when cuDNN is absent) and the prefill kernel tests; then W4 (32k) bf16
# and fp8 weights + fp8 KV with KVTIER_CUDA_PREFILL_ATTENTION=own and =cudnn, each setting in
# one process, with what ran the prefill attention (prefill_attention in the JSON).
# Carry: nvcc -O2 -std=c++17 -arch=sm_90a -Wno-deprecated-declarations -Isrc bench/micro/cudnn_sdpa.cu
#   src/backend/cuda/cudnn_graph.cc -lcudnn -o /tmp/micro/cudnn_sdpa;
#   ninja -C build kvtier_cli kvtier_cuda kvtier_cuda_{cudnn,cudnn_fallback,backend,prefill}_test;
#   scripts/device-carry.sh .carry/e build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/kvtier_cuda_{cudnn,cudnn_fallback,backend,prefill}_test /tmp/micro/cudnn_sdpa;
#   the anchors and COMMIT beside them; strip; tar cJf .carry/e.txz.
CARRY=e . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 ) &
MK=$!
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' > $R/cudnn.txt 2>&1
cat $R/cudnn.txt
# torch's cuDNN: loaded by kvtier from KVTIER_CUDNN_LIBRARY; its directory also on the library
# path, for the probe (linked with -lcudnn) and for cuDNN's own sub-libraries.
TORCH_CUDNN=$(dirname "$(find $(python3 -c 'import site;print(" ".join(site.getsitepackages()))') -name 'libcudnn.so.9' 2>/dev/null | head -1)")
export KVTIER_CUDNN_LIBRARY=$TORCH_CUDNN/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$TORCH_CUDNN
ls $TORCH_CUDNN >> $R/cudnn.txt
timeout 120 $C/bin/cudnn_sdpa > $R/cudnn_sdpa.txt 2>&1
echo "[$(el) s] cudnn_sdpa rc=$?"; grep -E "^cuDNN|RESULT|built in" $R/cudnn_sdpa.txt | cut -c1-170 | head -40
mkdir -p $R/tests
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
t cudnn 120 $C/bin/kvtier_cuda_cudnn_test
t cudnn_fallback 60 $C/bin/kvtier_cuda_cudnn_fallback_test
t backend_cudnn 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Cudnn*'
t prefill 60 $C/bin/kvtier_cuda_prefill_test --gtest_filter='-*Timing*'
grep -hE "Failure" -A6 $R/tests/*.txt | head -40
grep -hE "Skipped" -A1 $R/tests/cudnn.txt | head -4
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait $MK; echo "[$(el) s] ceilings + checkpoint"
for a in own cudnn; do
  [ $(el) -gt 470 ] && { echo "skipping W4 $a: out of time"; continue; }
  KVTIER_CUDA_PREFILL_ATTENTION=$a timeout $(( 585 - $(el) )) $C/bin/kvtier bench --workload W4 --model $M \
    --ceilings $R/ceilings.txt --json $R/bench-$a.json --commit "$(cat $C/COMMIT)" \
    --time-limit 60 --pass "fp8-kv8:W4:weight=fp8:kv=fp8" > $R/bench-$a.txt 2>&1
  echo "[$(el) s] bench $a rc=$?"
done
grep -E "^W4 .*prefill" $R/bench-own.txt $R/bench-cudnn.txt | cut -c1-150
python3 - $R/bench-own.json $R/bench-cudnn.json <<'PY'
import json, sys
def walk(x, where):
    if isinstance(x, dict):
        if "prefill_attention" in x:
            print(where, "prefill_attention:", x["prefill_attention"], "| ttft_s", x.get("ttft_s"), "|", x.get("compute_path", "")[:160])
        for k, v in x.items(): walk(v, where + "/" + k)
    elif isinstance(x, list):
        for i, v in enumerate(x): walk(v, where + "/" + str(i))
for f in sys.argv[1:]:
    try: walk(json.load(open(f)), f.split("/")[-1])
    except Exception as e: print(f, "unreadable:", e)
PY
tar czf $OUT/e.tgz -C /tmp r
