#!/usr/bin/env bash
# Call B: the saturated-server workloads with the fp8 passes' limits from the fp8 GEMM ceiling
# (call A's binaries): W9 (512 x 1,000 / 1,000) in bf16, then W9, W9a (1,024 x 128 / 128) and
# W9b (256 x 2,048 / 2,048) in fp8 weights + fp8 KV, one process, ceilings.py and
# lib_kernels.py in the same call.
CARRY=a . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 ) &
MK=$!
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings rc=$?"
timeout 150 python3 $C/anchors/lib_kernels.py > $R/lib_kernels.txt 2>&1
echo "[$(el) s] lib_kernels rc=$?"
wait $MK; echo "[$(el) s] checkpoint"
timeout $(( 580 - $(el) )) $C/bin/kvtier bench --model $M --ceilings $R/ceilings.txt --lib-kernels $R/lib_kernels.txt \
  --json $R/bench.json --commit "$(cat $C/COMMIT)" --time-limit 150 --workload W9 \
  --pass "fp8-kv8:W9,W9a,W9b:weight=fp8:kv=fp8" > $R/bench.txt 2>&1
echo "[$(el) s] bench rc=$?"
grep -E "^W9" $R/bench.txt | cut -c1-220
tar czf $OUT/b.tgz -C /tmp r
