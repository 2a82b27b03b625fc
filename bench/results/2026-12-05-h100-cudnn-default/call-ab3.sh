#!/usr/bin/env bash
# Call AB3: issue #35's W6c "load only from local disk" A/B again, db131da against main, W6c
# alone, old first in odd rounds and new first in even ones, nothing else writing to the disk,
# the disk's own O_DIRECT read speed (bench/micro/disk_read_order.cc) and free space logged
# before each run; main reports its reads in flight and the file's share of their time. First
# W3 on main with cuDNN's prefill (its scratch allocated under the cap) and without (=own).
# Carry ab3: scripts/device-carry.sh .carry/ab3/old <db131da's kvtier, libkvtier_cuda.so>;
#   scripts/device-carry.sh .carry/ab3/new <main's kvtier, libkvtier_cuda.so>; the libraries
#   old/lib shares with new/lib removed; scripts/carry-redis.sh .carry/ab3/redis;
#   disk_read_order in .carry/ab3/bin; ../shared/anchors; COMMIT; strip; tar cJf.
BUDGET=${BUDGET:-330} CARRY=ab3 . bench/results/device-call-prelude.sh
unset KVTIER_CUDA_MODULE   # each build loads the CUDA module next to its own program
M=/tmp/kb/llama3-8b
N=$C/new
export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64
$N/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
use_torch_libraries
for a in own default; do
  ( [ $a = own ] && export KVTIER_CUDA_PREFILL_ATTENTION=own
    timeout 60 $N/bin/kvtier bench --workload W3 --model $M --json $R/w3-$a.json --commit "$(cat $C/COMMIT)" \
      --time-limit 50 > $R/w3-$a.txt 2>&1 )
  echo "[$(el) s] W3 $a rc=$?"; grep -E "^W3 " $R/w3-$a.txt | cut -c1-110
done
LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 2 \
  --appendonly no --daemonize yes --dir $R --logfile $R/redis.log
for round in 1 2 3; do
  order="old new"; [ $((round % 2)) -eq 0 ] && order="new old"
  for which in $order; do
    [ "$(left)" -lt 45 ] && { echo "skip $which $round: out of time"; continue; }
    tiers=/tmp/kb/tiers-$which; rm -rf $tiers
    LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-cli -p 6390 flushall > /dev/null
    { df -B1M /tmp/kb | tail -1; timeout 20 $C/bin/disk_read_order /tmp/kb/probe 330 8 1; } > $R/disk-$which-$round.txt 2>&1
    LD_LIBRARY_PATH=$C/$which/lib:$N/lib:/usr/local/cuda/lib64 timeout $(( $(left) - 5 )) $C/$which/bin/kvtier bench \
      --workload W6c --model $M --json $R/w6c-$which-$round.json --time-limit 60 --tier-dir $tiers \
      --remote-kv-url redis://127.0.0.1:6390 > $R/w6c-$which-$round.txt 2>&1
    echo "[$(el) s] $which $round rc=$? | $(grep -E 'file order|shuffled' $R/disk-$which-$round.txt | tr -s ' ' | cut -c1-80 | tr '\n' ' ')"
    grep -E "^W6c .*(load only|disk delivered)" $R/w6c-$which-$round.txt | cut -c1-150
    rm -rf $tiers
    tar czf $OUT/ab3.tgz -C /tmp r   # kept current, should the call be cut short
  done
done
rm -f /tmp/kb/probe
tar czf $OUT/ab3.tgz -C /tmp r
