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
for h in 8GiB 1GiB; do
  echo "[$(el) s] W6c host $h" >> $R/log.txt
  W6C_HOST=$h $K bench --workload W6c $B --json $R/bench-w6c-host$h.json --remote-kv-url redis://127.0.0.1:6390 > $R/bench-w6c-host$h.txt 2>&1
  $RS $C/redis/bin/redis-cli -p 6390 flushall >> $R/log.txt 2>&1
done
kill "$(cat $R/redis.pid)" 2>/dev/null
echo "[$(el) s] end" >> $R/log.txt
cat $R/log.txt; grep -h 'vs recompute\|delivered' $R/bench-w6c-host*.txt | cut -c1-120; grep -E "^W6c" $R/bench-w6c*.txt
python3 - $R <<'PY'
import json,sys
for f in ['bench-w6c-host8GiB.json','bench-w6c-host1GiB.json']:
  try: w=json.load(open(sys.argv[1]+'/'+f))['workloads']['W6c']
  except Exception as e: print(f,e); continue
  for k in ['disk_plan_timeline','redis_plan_timeline']:
    t=w.get(k,{}); print(f,k,'writes',w['phases'][k.split('_tl')[0].replace('_timeline','')]['stats'].get('warm_up_writes'),'split',t.get('compute_blocks'),t.get('load_blocks'),'planned c/l ms',round(1e3*(t.get('compute_seconds_per_block_planned') or 0),3),round(1e3*(t.get('load_seconds_per_block_planned') or 0),3))
    for p in t.get('progress',[]): print('   t=%.4f comp=%d landed_from=%d landed=%d attach_at=%d'%(p['after_s'],p['computed_tokens']//16,p['landed_from'],p['landed'],p['attach_at']))
PY
(cd $OUT && tar cJf results.txz r && rm -rf r)
