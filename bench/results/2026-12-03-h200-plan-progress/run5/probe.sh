#!/usr/bin/env bash
# Host I/O beside GPU work (iogpu.py), then W6c at io-threads 4 and 1 with plan progress.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/d "$OUT/r"; R=$OUT/r
tar xJf .carry/d.txz -C /tmp/d
C=/tmp/d/d; K=$C/bin/kvtier; M=/tmp/kb/llama3-8b; T=/tmp/kb/tiers; COMMIT=$(cat $C/COMMIT)
mkdir -p $T
RS="env LD_LIBRARY_PATH=$C/redis/lib"
(nproc; cat /sys/fs/cgroup/cpu.max 2>/dev/null; cat /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null; lscpu | grep -E "^CPU\(s\)|Thread|Core|Socket|Model name|NUMA"; free -g) > $R/cpu.txt 2>&1
dd if=/dev/zero of=$T/raw bs=8M count=512 oflag=direct 2>/dev/null; sync
$RS $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 4 --appendonly no --daemonize yes --dir $R --pidfile $R/redis.pid --logfile $R/redis.log
sleep 0.5
$RS $C/redis/bin/redis-benchmark -p 6390 -t set -d 2097152 -n 1000 -c 4 -r 1000 -q > /dev/null 2>&1
echo "[$(el) s] iogpu" >> $R/log.txt
for w in disk redis; do for m in idle spin block; do timeout 60 python3 .carry/iogpu.py $m $w $C $T >> $R/iogpu.txt 2>&1; done; done
kill "$(cat $R/redis.pid)" 2>/dev/null; sleep 1; rm -f $T/raw
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so
$K mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
B="--model $M --commit $COMMIT --time-limit 60 --tier-dir $T --tier-time-limit 60"
for io in 4 1; do
  $RS $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads $io --appendonly no --daemonize yes --dir $R --pidfile $R/redis.pid --logfile $R/redis-$io.log
  sleep 0.5
  echo "[$(el) s] W6c io$io" >> $R/log.txt
  $K bench --workload W6c $B --json $R/bench-w6c-io$io.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c-io$io.txt 2>&1
  kill "$(cat $R/redis.pid)" 2>/dev/null; sleep 1
done
echo "[$(el) s] end" >> $R/log.txt
cat $R/log.txt $R/cpu.txt $R/iogpu.txt; grep -h 'plan\|delivered' $R/bench-w6c-*.txt | grep -v TTFT
python3 - $R <<'PY'
import json,sys
for f in ['bench-w6c-io4.json','bench-w6c-io1.json']:
  try: w=json.load(open(sys.argv[1]+'/'+f))['workloads']['W6c']
  except Exception as e: print(f,e); continue
  for k in ['disk_plan_timeline','redis_plan_timeline']:
    t=w.get(k,{}); print(f,k,'split',t.get('compute_blocks'),t.get('load_blocks'))
    for p in t.get('progress',[]): print('   t=%.4f comp=%d landed_from=%d landed=%d attach_at=%d'%(p['after_s'],p['computed_tokens']//16,p['landed_from'],p['landed'],p['attach_at']))
PY
(cd $OUT && tar cJf results.txz r && rm -rf r)
