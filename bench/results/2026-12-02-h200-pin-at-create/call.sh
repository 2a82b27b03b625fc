#!/usr/bin/env bash
# One device call: W6, W6b (new process over W6's disk file), W6c (local disk and Redis
# phases) on main with the host tier pinned from KvCacheManager::Create; then the ceilings
# of the two slow tiers on that machine: Redis GET of 2 MiB values (redis-benchmark, 4 and
# 8 connections), W6c again with redis-server reading on 6 I/O threads, and O_DIRECT reads of
# W6's disk file (dd, 1 and 8 readers). Binaries built on the CPU machine and carried in
# .carry/d.txz (scripts/device-carry.sh + scripts/carry-redis.sh + redis-benchmark).
# Results in $OUT/r.
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
echo "[$(el) s] disk ceiling rc=$?" >> $R/log.txt
F=$T/w6.kvdisk; ls -l $F >> $R/ceilings.txt
t() { date +%s.%N; }
a=$(t); dd if=$F of=/dev/null bs=8M count=64 iflag=direct 2>>$R/ceilings.txt; b=$(t)
echo "dd 1 reader O_DIRECT 512 MiB: $(python3 -c "print(0.5/($b-$a))") GiB/s" >> $R/ceilings.txt
a=$(t); for i in 0 1 2 3 4 5 6 7; do dd if=$F of=/dev/null bs=2M count=64 skip=$((256+i*64)) iflag=direct 2>/dev/null & done; wait; b=$(t)
echo "dd 8 readers O_DIRECT 2 MiB reads, 1 GiB: $(python3 -c "print(1/($b-$a))") GiB/s" >> $R/ceilings.txt
echo "[$(el) s] W6c rc=$?" >> $R/log.txt
RS="LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin"
env LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 2 \
  --appendonly no --daemonize yes --dir $R --pidfile $R/redis.pid --logfile $R/redis.log
sleep 0.5
$K bench --workload W6c $B --json $R/bench-w6c.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c.txt 2>&1
echo "[$(el) s] redis ceiling rc=$?" >> $R/log.txt
for c in 4 8; do echo "redis-benchmark io-threads 2, 2 MiB values, $c connections:" >> $R/ceilings.txt
  env LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-benchmark -h 127.0.0.1 -p 6390 -t set,get -d 2097152 -n 800 -c $c -q >> $R/ceilings.txt 2>&1; done
kill "$(cat $R/redis.pid)" 2>/dev/null; sleep 1
echo "[$(el) s] W6c io-threads 6" >> $R/log.txt
env LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-server --port 6391 --bind 127.0.0.1 --save '' --io-threads 6 \
  --io-threads-do-reads yes --appendonly no --daemonize yes --dir $R --pidfile $R/redis6.pid --logfile $R/redis6.log
sleep 0.5
$K bench --workload W6c $B --json $R/bench-w6c-io6.json --remote-kv-url redis://127.0.0.1:6391 > $R/bench-w6c-io6.txt 2>&1
for c in 4 8; do echo "redis-benchmark io-threads 6, 2 MiB values, $c connections:" >> $R/ceilings.txt
  env LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-benchmark -h 127.0.0.1 -p 6391 -t set,get -d 2097152 -n 800 -c $c -q >> $R/ceilings.txt 2>&1; done
echo "[$(el) s] end rc=$?" >> $R/log.txt
kill "$(cat $R/redis6.pid)" 2>/dev/null
cat $R/log.txt $R/ceilings.txt; grep -E "^W6" $R/bench-w6*.txt
