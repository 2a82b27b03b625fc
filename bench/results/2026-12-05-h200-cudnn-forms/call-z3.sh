#!/usr/bin/env bash
# Call Z3: cuDNN's fused attention on the padded form (the chunk's sq and skv as device
# tensors, the matmuls' M, N and K overridden by them, padding masked), which lets one plan
# serve a bucket of key counts: the probe's sweep, then the padded forms and the frontend's
# unpadded one checked (on key rows rounded up to 64) and timed, each in its own process; the
# cuDNN tests and the backend's cuDNN prefill; the whole backend, fp8 and prefill tests and
# the goldens with the wgmma scored prefill on by default; then W4 (32k) bf16 with
# KVTIER_CUDA_PREFILL_ATTENTION=own and =cudnn.
# Carry: as call-z2.sh (carry z3), plus build/tests/backend_cuda/kvtier_cuda_fp8_test.
CARRY=z3 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
mkdir -p $R/tests
left() { echo $(( ${BUDGET:-578} - $(el) )); }
t() { local name=$1 lim=$2; shift 2; [ $(left) -lt 15 ] && { echo "skip $name: out of time"; return; }
  [ $lim -gt $(left) ] && lim=$(left)
  timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | sort -u | cut -c1-100 | tr '\n' ' ')"; }
SRC=$(cat $C/SOURCE_DIR)
[ -f "$SRC/tests/parity/moe_goldens.json" ] || { mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; }
export KVTIER_CLI=$C/bin/kvtier
SITE=$(python3 -c 'import site;print(" ".join(site.getsitepackages()))')
CUDNN_LIB=$(find $SITE -name 'libcudnn.so.9' 2>/dev/null | head -1)
export KVTIER_CUDNN_LIBRARY=$CUDNN_LIB
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "${CUDNN_LIB:-/x/y}")
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
for a in own cudnn; do
  [ $(left) -lt 60 ] && { echo "skip W4 $a: out of time"; continue; }
  KVTIER_CUDA_PREFILL_ATTENTION=$a timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W4 --model $M \
    --ceilings $R/ceilings.txt --json $R/w4-$a.json --commit "$(cat $C/COMMIT)" --time-limit 40 > $R/w4-$a.txt 2>&1
  echo "[$(el) s] W4 $a rc=$?"; grep -E "^W4 " $R/w4-$a.txt | cut -c1-160
done
grep -ho '"prefill_attention": *"[^"]*"' $R/w4-*.json 2>/dev/null | cut -c1-300
tar czf $OUT/z3.tgz -C /tmp r
