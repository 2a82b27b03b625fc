#!/usr/bin/env bash
# Call K: main after merging the GGUF completion, the OpenAI server (model-sized KV pools,
# `kvtier run` printing text) and the test-suite work: every CUDA test binary, the demo model
# and its GGUF on the CUDA backend (same text), and whole W1/W2 backend steps in bf16 and fp8
# (kvtier_cuda_bench, KVTIER_BENCH_QUICK) against calls G-I.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/k.txz -C /tmp/c
C=/tmp/c/k; R=/tmp/r; mkdir -p $R/tests
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
for b in backend fp8 skinny host_kv memory kernels decode prefill sampling plan; do t $b 120 $C/bin/kvtier_cuda_${b}_test; done
grep -hE "Failure" -A5 $R/tests/*.txt | head -24
$C/bin/kvtier convert --model models/demo --to gguf --out /tmp/demo.gguf > $R/convert.txt 2>&1; echo "convert rc=$?"
for m in models/demo /tmp/demo.gguf; do
  $C/bin/kvtier run --model $m --backend cuda --prompt "Once upon a time" --prompt "The meaning of life is" \
    --temperature 0 --max-tokens 48 > $R/run-$(basename $m).txt 2> $R/run-$(basename $m).err; echo "run $m rc=$?"
done
cmp $R/run-demo.txt $R/run-demo.gguf.txt && echo "GGUF on CUDA: same text as the demo directory"; head -c 300 $R/run-demo.txt; echo
for w in bf16 fp8; do
  env KVTIER_BENCH_QUICK=1 $( [ $w = fp8 ] && echo KVTIER_BENCH_WEIGHT_DTYPE=fp8 ) timeout 60 $C/bin/kvtier_cuda_bench > $R/step-$w.txt 2>&1
  echo "[$(el) s] $w rc=$?: $(grep -E 'decode|prefill' $R/step-$w.txt | sed 's/  */ /g' | tr '\n' ';')"
done
tar czf $OUT/k.tgz -C /tmp r
