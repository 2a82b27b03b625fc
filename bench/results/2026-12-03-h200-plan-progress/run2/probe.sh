#!/usr/bin/env bash
# Probe: W6c (bf16 KV, fp8 KV) with the plans' progress recorded; the disk's raw direct reads
# at 1, 8, 16 and 32 in flight (dd, 2 MiB). Results in $OUT/results.txz.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/d "$OUT/r"; R=$OUT/r
tar xJf .carry/d.txz -C /tmp/d
C=/tmp/d/d; K=$C/bin/kvtier; M=/tmp/kb/llama3-8b; T=/tmp/kb/tiers; COMMIT=$(cat $C/COMMIT)
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
$K mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
B="--model $M --commit $COMMIT --time-limit 60 --tier-dir $T --tier-time-limit 60"
RS="env LD_LIBRARY_PATH=$C/redis/lib"
$RS $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 4 \
  --appendonly no --daemonize yes --dir $R --pidfile $R/redis.pid --logfile $R/redis.log
sleep 0.5
echo "[$(el) s] W6c" >> $R/log.txt
$K bench --workload W6c $B --json $R/bench-w6c.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c.txt 2>&1
$RS $C/redis/bin/redis-cli -p 6390 flushall >> $R/log.txt 2>&1
echo "[$(el) s] W6c fp8" >> $R/log.txt
$K bench --workload W6c $B --kv-dtype fp8 --json $R/bench-w6c-kv8.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c-kv8.txt 2>&1
kill "$(cat $R/redis.pid)" 2>/dev/null
echo "[$(el) s] dd" >> $R/log.txt
df -h $T > $R/disk.txt; mount | grep -E " / | /tmp" >> $R/disk.txt; lsblk >> $R/disk.txt 2>&1
dd if=/dev/zero of=$T/raw bs=8M count=512 oflag=direct 2>> $R/disk.txt; sync
for n in 1 8 16 32; do
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
  s=$(date +%s.%N)
  per=$((2048 / n))
  for i in $(seq 0 $((n-1))); do dd if=$T/raw of=/dev/null bs=2M count=$per skip=$((i*per)) iflag=direct 2>/dev/null & done; wait
  e=$(date +%s.%N)
  echo "direct reads, $n in flight: $(python3 -c "print(round(4294967296/($e-$s)/1e9,2))") GB/s" >> $R/disk.txt
done
rm -f $T/raw
echo "[$(el) s] end" >> $R/log.txt
(cd $OUT && tar cJf results.txz r && rm -rf r)
