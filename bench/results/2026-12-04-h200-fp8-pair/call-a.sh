#!/usr/bin/env bash
# Call A: the GPU code not yet run on a device. The CUDA tests (fp8, prefill attention with
# its timing sweep, backend, decode), the Mixtral / Qwen3-MoE goldens from transformers, the
# decode attention sweep (fp8 KV in rounds of 32 positions with 16-byte loads against the
# default, every split count), then kvtier bench in separate processes on the same
# checkpoint with the ceilings: W2 and W4 in fp8 weights + fp8 KV with the fp8 pair tiles
# off (default) and on, W4 with the wgmma prefill variants 4 and 5 (softmax overlapped with
# the next tile's MMAs) against the default, in bf16.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf .carry/a.txz -C /tmp/c
C=/tmp/c/a; R=/tmp/r; mkdir -p $R
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
timeout 30 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings rc=$?"
for t in fp8 prefill backend decode; do
  timeout 150 $C/bin/kvtier_cuda_${t}_test > $R/${t}_test.txt 2>&1; rc=$?
  echo "[$(el) s] $t test rc=$rc: $(grep -cE '^\[       OK \]' $R/${t}_test.txt) ok; $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/${t}_test.txt | cut -c1-100 | tr '\n' ' ')"
done
grep -E "prefill-attention" $R/prefill_test.txt | cut -c1-170 | head -40
timeout 150 python3 scripts/make_goldens.py --kvtier $C/bin/kvtier --models moe --out $R/moe_goldens.json > $R/goldens.txt 2>&1
echo "[$(el) s] moe goldens rc=$?"; tail -n 5 $R/goldens.txt
KVTIER_DECODE_BENCH=1 timeout 100 $C/bin/kvtier_cuda_bench > $R/decode_attention.txt 2>&1
echo "[$(el) s] decode attention rc=$?"; grep -E "fp8" $R/decode_attention.txt | grep -E "W2|W9" | cut -c1-200 | head -40
while [ ! -e $M.ready ]; do sleep 1; done; echo "[$(el) s] model ready"
bench() {  # name, env assignments..., then -- and the bench arguments
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout $(( 575 - $(el) )) $C/bin/kvtier bench --model $M --ceilings $R/ceilings.txt \
    --json $R/bench-$name.json --commit "$(cat $C/COMMIT)" --time-limit 60 --tier-dir /tmp/kb/tiers "$@" > $R/bench-$name.txt 2>&1
  echo "[$(el) s] bench $name rc=$?"
  grep -E "^W[0-9]+ .*(prefill|decode tok)" $R/bench-$name.txt | cut -c1-160
}
bench fp8 KVTIER_CUDA_DECODE_FP8_PAIR=0 -- --workload W2,W4 --weight-dtype fp8 --kv-dtype fp8
bench fp8-pair KVTIER_CUDA_DECODE_FP8_PAIR=1 -- --workload W2 --weight-dtype fp8 --kv-dtype fp8
bench bf16 KVTIER_CUDA_PREFILL_VARIANT=0 -- --workload W2,W4
bench bf16-v4 KVTIER_CUDA_PREFILL_VARIANT=4 -- --workload W4
bench bf16-v5 KVTIER_CUDA_PREFILL_VARIANT=5 -- --workload W4
tar czf $OUT/a.tgz -C /tmp r
