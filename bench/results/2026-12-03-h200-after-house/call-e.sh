#!/usr/bin/env bash
# Call E: main after the merges (CudaBackend in parts, tiers as stores, GGUF): every CUDA test
# binary, the GPU memory test with a Redis server carried (its remote-tier variant), a GGUF of
# the demo model on the CUDA backend against the safetensors one, then W1, W2 and the fp8 pass
# in one bench process (the A/B against call C of ../2026-12-03-h200-cap-and-fp8).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/e.txz -C /tmp/c
C=/tmp/c/e; R=/tmp/r; mkdir -p $R/tests
export LD_LIBRARY_PATH=$C/lib:$C/redis/lib:$C/redis/hiredis:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
export PATH=$C/redis/bin:$PATH PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
for b in backend fp8 skinny host_kv memory kernels decode prefill sampling plan; do t $b 150 $C/bin/kvtier_cuda_${b}_test; done
grep -hE "gpu memory cap: (engine 13|engine 14|no Redis|first|an engine)|W8A8\]" $R/tests/*.txt | cut -c1-150
grep -hE "Failure" -A5 $R/tests/*.txt | head -24
$C/bin/kvtier convert --model models/demo --to gguf --out /tmp/demo.gguf > $R/convert.txt 2>&1; echo "[$(el) s] convert rc=$?"
for m in models/demo /tmp/demo.gguf; do
  $C/bin/kvtier run --model $m --backend cuda --prompt "Once upon a time" --temperature 0 --max-tokens 48 > $R/run-$(basename $m).txt 2>&1; echo "rc=$?"
done
cmp $R/run-demo.txt $R/run-demo.gguf.txt && echo "GGUF on CUDA: same text as the safetensors demo" || { echo "GGUF on CUDA differs:"; head -5 $R/run-*.txt; }
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
timeout 25 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
timeout $(( 560 - $(el) )) $C/bin/kvtier bench --workload W1,W2 --model $M --ceilings $R/ceilings.txt --json $R/bench.json \
  --commit "$(cat $C/COMMIT)" --time-limit 40 --pass fp8:W1,W2:weight=fp8 > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W[12] .*(decode tok|prefill tok|end-to-end)" $R/bench.txt
tar czf $OUT/e.tgz -C /tmp r
