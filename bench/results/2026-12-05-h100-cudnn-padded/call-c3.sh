#!/usr/bin/env bash
# Call C3, with cuDNN's prefill attention on by default: the goldens through the default
# path; W2 and W6 (many short prompt chunks) with the prefill attention on our kernel and on
# cuDNN; the restructure's A/B second round for W6c (db131da against main, both on our kernel);
# then a Qwen3-30B-A3B-shaped random checkpoint (fp8 ct-channel on disk) through W1 and W2 in
# bf16 and, in a second pass of the same process, fp8 weights + fp8 KV, with the limits from
# the checkpoint's shape and the ceilings measured in this call.
# Carry c3: scripts/device-carry.sh .carry/c3 <kvtier, libkvtier_cuda.so, kvtier_cuda_parity_test>;
#   old/{bin/kvtier, lib/libkvtier_cuda.so} of db131da (call-ab2's); scripts/carry-redis.sh
#   .carry/c3/redis; ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar cJf.
BUDGET=${BUDGET:-470} CARRY=c3 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
Q=/tmp/kb/qwen3-30b-a3b-fp8
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready
  $C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1; touch $Q.ready ) &
link_source_dir
use_torch_libraries
t parity 60 $C/bin/kvtier_cuda_parity_test
grep -hE "Failure" -A5 $R/tests/parity.txt | head -20
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
while [ ! -e $M.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] ceilings + model"
for a in own cudnn; do
  KVTIER_CUDA_PREFILL_ATTENTION=$a timeout 90 $C/bin/kvtier bench --workload W2,W6 --model $M --ceilings $R/ceilings.txt \
    --tier-dir /tmp/kb/tiers-$a --json $R/w2w6-$a.json --commit "$(cat $C/COMMIT)" --time-limit 40 > $R/w2w6-$a.txt 2>&1
  echo "[$(el) s] W2,W6 $a rc=$?"; grep -E "^W2   decode|^W2   end|^W2   prefill|^W6   batch|^W6   TTFT 1 seq, prefix rec" $R/w2w6-$a.txt | cut -c1-130
done
LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 2 \
  --appendonly no --daemonize yes --dir $R --logfile $R/redis.log
unset KVTIER_CUDA_MODULE   # each build loads the CUDA module next to its own program
for which in old new; do
  bin=$C/bin/kvtier; lib=$C/lib; [ $which = old ] && { bin=$C/old/bin/kvtier; lib=$C/old/lib:$C/lib; }
  rm -rf /tmp/kb/tiers-w6c
  LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64 KVTIER_CUDA_PREFILL_ATTENTION=own timeout 80 $bin bench --workload W6c --model $M \
    --tier-dir /tmp/kb/tiers-w6c --remote-kv-url redis://127.0.0.1:6390 --json $R/w6c-$which-2.json --time-limit 60 \
    > $R/w6c-$which-2.txt 2>&1
  echo "[$(el) s] W6c $which rc=$?"; grep -E "^W6c" $R/w6c-$which-2.txt | cut -c1-110
done
export KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
rm -rf $M /tmp/kb/tiers-*
while [ ! -e $Q.ready ] && [ $(left) -gt 60 ]; do sleep 1; done; echo "[$(el) s] qwen3moe written"; tail -1 $R/mkmodel-qwen3moe.txt
[ $(left) -gt 60 ] && timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1,W2 --model $Q --weight-dtype bf16 \
  --pass fp8:W1,W2:weight=fp8:kv=fp8 --ceilings $R/ceilings.txt --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 > $R/qwen3moe.txt 2>&1
echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W[12] " $R/qwen3moe.txt | cut -c1-160
tar czf $OUT/c3.tgz -C /tmp r
