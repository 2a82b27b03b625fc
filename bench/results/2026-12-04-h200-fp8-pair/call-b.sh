#!/usr/bin/env bash
# Call B: fp8 pair tiles on by default (kFp8PairTiles). The decode and fp8 tests on the new
# default, then kvtier bench with the ceilings: W1, W2 and W9 in fp8 weights + fp8 KV on the
# default, and W1, W2 again with the pair tiles off (KVTIER_CUDA_DECODE_FP8_PAIR=0), the
# same-machine A/B.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/b.txz -C /tmp/c
C=/tmp/c/b; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
M=/tmp/kb/llama3-8b
( [ -e $M.ready ] || { $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready; } ) &
timeout 30 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings rc=$?"
for t in decode fp8; do
  timeout 150 $C/bin/kvtier_cuda_${t}_test > $R/${t}_test.txt 2>&1; rc=$?
  echo "[$(el) s] $t test rc=$rc: $(grep -cE '^\[       OK \]' $R/${t}_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/${t}_test.txt | cut -c1-100 | tr '\n' ' ')"
done
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
bench() {  # name, env assignments..., then -- and the bench arguments
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout $(( 575 - $(el) )) $C/bin/kvtier bench --model $M --ceilings $R/ceilings.txt \
    --json $R/bench-$name.json --commit "$(cat $C/COMMIT)" "$@" > $R/bench-$name.txt 2>&1
  echo "[$(el) s] bench $name rc=$?"
  grep -E "^W[0-9]+ .*(prefill|decode tok|output tok)" $R/bench-$name.txt | cut -c1-160
}
bench fp8 KVTIER_BENCH_TAG=default -- --workload W1,W2,W9 --weight-dtype fp8 --kv-dtype fp8 --time-limit 150
bench fp8-nopair KVTIER_CUDA_DECODE_FP8_PAIR=0 -- --workload W1,W2 --weight-dtype fp8 --kv-dtype fp8 --time-limit 60
tar czf $OUT/b.tgz -C /tmp r
