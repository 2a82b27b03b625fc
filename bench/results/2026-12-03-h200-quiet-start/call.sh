#!/usr/bin/env bash
# One device call: W6, W6b (new process over W6's disk file), W6c bf16 KV, fp8 KV, and bf16
# KV with 8 Redis connections (local disk and Redis phases; each measured prompt after its
# warm-up's writes have landed, the plans' progress step by step); then Redis GET of 2 MiB
# values with 4 and 50 clients (redis-benchmark: what the server gives few connections),
# the same GETs beside GPU work in another process (iogpu.py: idle, spinning and blocking
# synchronisation), and W6b once more. Results
# come back as one archive, results.txz (r/). Binaries
# built on the CPU machine and carried in .carry/d.txz (scripts/device-carry.sh +
# scripts/carry-redis.sh, redis-benchmark added). Results in $OUT/r.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/d "$OUT/r"; R=$OUT/r
tar xJf .carry/d.txz -C /tmp/d 2>/dev/null || python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .carry/d.txz /tmp/d
C=/tmp/d/d; K=$C/bin/kvtier; M=/tmp/kb/llama3-8b; T=/tmp/kb/tiers; COMMIT=$(cat $C/COMMIT)
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
echo "[$(el) s] mkmodel" >> $R/log.txt
$K mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
B="--model $M --commit $COMMIT --time-limit 60 --tier-dir $T --tier-time-limit 60"
echo "[$(el) s] W6" >> $R/log.txt
$K bench --workload W6 $B --json $R/bench-w6.json > $R/bench-w6.txt 2>&1
echo "[$(el) s] W6b rc=$?" >> $R/log.txt
$K bench --workload W6b $B --json $R/bench-w6b.json > $R/bench-w6b.txt 2>&1
echo "[$(el) s] W6c rc=$?" >> $R/log.txt
RS="env LD_LIBRARY_PATH=$C/redis/lib"
$RS $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 4 \
  --appendonly no --daemonize yes --dir $R --pidfile $R/redis.pid --logfile $R/redis.log
sleep 0.5
$K bench --workload W6c $B --json $R/bench-w6c.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c.txt 2>&1
echo "[$(el) s] W6c fp8 KV rc=$?" >> $R/log.txt
$RS $C/redis/bin/redis-cli -p 6390 flushall >> $R/log.txt 2>&1
$K bench --workload W6c $B --kv-dtype fp8 --json $R/bench-w6c-kv8.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c-kv8.txt 2>&1
echo "[$(el) s] W6c 8 connections rc=$?" >> $R/log.txt
$RS $C/redis/bin/redis-cli -p 6390 flushall >> $R/log.txt 2>&1
$K bench --workload W6c $B --remote-kv-connections 8 --json $R/bench-w6c-conn8.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c-conn8.txt 2>&1
echo "[$(el) s] redis-benchmark rc=$?" >> $R/log.txt
for c in 4 50; do
  $RS timeout 60 $C/redis/bin/redis-benchmark -p 6390 -t set,get -d 2097152 -n 2000 -c $c -r 1000 -q > $R/redis-benchmark-c$c.txt 2>&1
done
echo "[$(el) s] iogpu rc=$?" >> $R/log.txt
for m in idle spin block; do timeout 60 python3 .carry/iogpu.py $m redis $C $T >> $R/iogpu.txt 2>&1; done
kill "$(cat $R/redis.pid)" 2>/dev/null; sleep 1
echo "[$(el) s] W6b again" >> $R/log.txt
$K bench --workload W6b $B --json $R/bench-w6b-2.json > $R/bench-w6b-2.txt 2>&1
echo "[$(el) s] end rc=$?" >> $R/log.txt
cat $R/log.txt $R/iogpu.txt; grep -E "^W6" $R/bench-w6*.txt; cat $R/redis-benchmark-c*.txt | tr "\r" "\n" | grep -E "requests per second"
(cd $OUT && tar cJf results.txz r && rm -rf r)
