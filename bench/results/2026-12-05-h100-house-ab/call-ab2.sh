#!/usr/bin/env bash
# Call AB2: W4 (32k, 24 GiB cap) with the prefill attention on our kernel and on cuDNN (plans
# per power-of-two key bucket, built at warm-up), bf16 and fp8 KV; then the restructure's
# same-machine A/B (issue #35): db131da against main through bench/ab.sh, one round, on W1, W2,
# W5, W6 (+ W6b), W6c (disk, and remote through a carried Redis) and W8, both builds on their
# default prefill attention (our kernel); then W8 with cuDNN's prefill attention if time is left.
# Carry ab2: scripts/device-carry.sh .carry/ab2/old <db131da's kvtier, libkvtier_cuda.so>;
#   scripts/device-carry.sh .carry/ab2/new <main's kvtier, libkvtier_cuda.so, kvtier_cuda_cudnn_test>;
#   the libraries old/lib shares with new/lib removed (ab.sh puts new/lib on old's path);
#   scripts/carry-redis.sh .carry/ab2/redis; ../shared/anchors; COMMIT; strip; tar cJf.
CARRY=ab2 . bench/results/device-call-prelude.sh
unset KVTIER_CUDA_MODULE   # each build loads the CUDA module next to its own program
M=/tmp/kb/llama3-8b
N=$C/new
export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64
$N/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
use_torch_libraries
t cudnn 40 $N/bin/kvtier_cuda_cudnn_test
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings + model"
w4() {  # w4 ATTENTION KV_DTYPE
  KVTIER_CUDA_PREFILL_ATTENTION=$1 timeout 60 $N/bin/kvtier bench --workload W4 --model $M --kv-dtype $2 \
    --ceilings $R/ceilings.txt --json $R/w4-$1-$2.json --commit "$(cat $C/COMMIT)" --time-limit 40 > $R/w4-$1-$2.txt 2>&1
  echo "[$(el) s] W4 $1 kv $2 rc=$?"; grep -E "^W4   prefill" $R/w4-$1-$2.txt | cut -c1-140
  grep -ho '"prefill_attention": *"[^"]*"' $R/w4-$1-$2.json | head -1 | cut -c1-200
}
for kv in auto fp8; do for a in own cudnn; do w4 $a $kv; done; done
LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 2 \
  --appendonly no --daemonize yes --dir $R --logfile $R/redis.log
MODEL_DIR=$M TIME_LIMIT=90 BENCH_FLAGS="--remote-kv-url redis://127.0.0.1:6390" \
  timeout $(( $(left) - 10 )) bash bench/ab.sh $C $R/ab W1,W2,W5,W6,W6c,W8 1 2>&1 | tee $R/ab.txt | cut -c1-150
echo "[$(el) s] ab done"
if [ $(left) -gt 75 ]; then
  export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64:$(dirname "$KVTIER_CUDNN_LIBRARY")
  KVTIER_CUDA_PREFILL_ATTENTION=cudnn timeout $(( $(left) - 5 )) $N/bin/kvtier bench --workload W8 --model $M \
    --ceilings $R/ceilings.txt --json $R/w8-cudnn.json --commit "$(cat $C/COMMIT)" --time-limit 60 > $R/w8-cudnn.txt 2>&1
  echo "[$(el) s] W8 cudnn rc=$?"; grep -E "^W8 " $R/w8-cudnn.txt | cut -c1-150
fi
tar czf $OUT/ab2.tgz -C /tmp r
