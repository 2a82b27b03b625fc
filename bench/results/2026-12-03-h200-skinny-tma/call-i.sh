#!/usr/bin/env bash
# Call I: W8A8 decode projections on the TMA pipeline by default. The CUDA tests that run the
# skinny kernels (skinny, backend against the CPU with W8A8, fp8), then one kvtier bench
# process with W1 and W2 in bf16 and the fp8 and fp8 + fp8 KV passes (ceilings in the same
# call), then W2 fp8 alone, alternating the default (TMA) with KVTIER_CUDA_SKINNY=2 (fp8 codes
# on the overlapped cp.async pipeline, the previous default), two rounds.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/i.txz -C /tmp/c
C=/tmp/c/i; R=/tmp/r; mkdir -p $R/tests
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
t skinny 90 $C/bin/kvtier_cuda_skinny_test
t fp8 90 $C/bin/kvtier_cuda_fp8_test
t backend 170 $C/bin/kvtier_cuda_backend_test
grep -hE "W8A8\]|W8A8 " $R/tests/backend.txt | cut -c1-140 | head -8
grep -hE "Failure" -A5 $R/tests/*.txt | head -20
timeout 25 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout 200 $C/bin/kvtier bench --workload W1,W2 --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 40 --pass fp8:W1,W2:weight=fp8 --pass fp8-kv8:W1,W2:weight=fp8:kv=fp8 > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W[12] .*(decode tok|prefill tok|end-to-end)" $R/bench.txt
for round in 1 2; do for mode in default 2; do
  env $( [ $mode = 2 ] && echo KVTIER_CUDA_SKINNY=2 ) timeout 60 $C/bin/kvtier bench --workload W2 --model $M --weight-dtype fp8 \
    --json $R/ab-$mode-$round.json --time-limit 30 > $R/ab-$mode-$round.txt 2>&1
  echo "[$(el) s] W2 fp8 skinny=$mode round $round: $(grep -E '^W2 +(decode tok|end-to-end)' $R/ab-$mode-$round.txt | cut -c1-70 | sed 's/  */ /g' | tr '\n' ';')"
done; done
tar czf $OUT/i.tgz -C /tmp r
