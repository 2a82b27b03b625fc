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
for a in own cudnn; do
  [ $(left) -lt 60 ] && { echo "skip W4 $a: out of time"; continue; }
  KVTIER_CUDA_PREFILL_ATTENTION=$a timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W4 --model $M \
    --ceilings $R/ceilings.txt --json $R/w4-$a.json --commit "$(cat $C/COMMIT)" --time-limit 40 > $R/w4-$a.txt 2>&1
  echo "[$(el) s] W4 $a rc=$?"; grep -E "^W4 " $R/w4-$a.txt | cut -c1-160
done
grep -ho '"prefill_attention": *"[^"]*"' $R/w4-*.json 2>/dev/null | cut -c1-300
tar czf $OUT/z2.tgz -C /tmp r
