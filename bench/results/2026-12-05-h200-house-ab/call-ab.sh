#!/usr/bin/env bash
# The restructure's same-machine A/B (issue #35): db131da (before the tiers-as-stores and
# CudaBackend-in-parts restructure) against main, through bench/ab.sh, alternating old and new
# each round, on W1, W2, W5, W6 (+ W6b in a new process over W6's disk file), W6c (disk and, with a
# carried Redis server, remote) and W8 (131k tokens under the 24 GiB cap).
# Carry: scripts/device-carry.sh .carry/ab/old <db131da's kvtier and libkvtier_cuda.so>;
#   scripts/device-carry.sh .carry/ab/new <main's>; scripts/carry-redis.sh .carry/ab/redis; strip; tar cJf.
CARRY=ab . bench/results/device-call-prelude.sh
unset KVTIER_CUDA_MODULE   # each build loads the CUDA module next to its own program
LD_LIBRARY_PATH=$C/redis/lib $C/redis/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' --io-threads 2 \
  --appendonly no --daemonize yes --dir $R --logfile $R/redis.log
MODEL_DIR=/tmp/kb/llama3-8b TIME_LIMIT=90 BENCH_FLAGS="--remote-kv-url redis://127.0.0.1:6390" \
  timeout $(( 585 - $(el) )) bash bench/ab.sh $C $R/ab W1,W2,W5,W6,W6c,W8 2 2>&1 | tee $R/ab.txt | cut -c1-150
echo "[$(el) s] ab done"
tar czf $OUT/ab.tgz -C /tmp r
