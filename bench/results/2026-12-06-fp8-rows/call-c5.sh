#!/usr/bin/env bash
# Call C5: (1) kvtier_cuda_fp8_test with the time it needs (C3's and C4's 60 s and 40 s cut its
# KV attention cases short); (2) issue #41: Mixtral 8x7B in fp8 weights (--weight-dtype fp8;
# C4 loaded the fp8 checkpoint widened to bf16, 94.7 GB, more than the H100 holds) + fp8 KV
# end to end, W1 and W2 through `kvtier bench` with this call's ceilings.
# Carry c5: C4's new/ (kvtier, libkvtier_cuda.so, kvtier_cuda_fp8_test), anchors, COMMIT.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=c5 . bench/results/device-call-prelude.sh
X=/tmp/kb/mixtral-8x7b-fp8
mkdir -p /tmp/kb
$C/bin/kvtier mkmodel --preset mixtral-8x7b --fp8 ct-channel --out $X > $R/mkmodel-mixtral.txt 2>&1 &
mk=$!
t fp8_test 200 $C/bin/kvtier_cuda_fp8_test
tar czf $OUT/c5.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-mixtral.txt | cut -c1-100)"
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(head -c 100 $R/ceilings.txt)"
for w in W1 W2; do
  [ "$(left)" -lt 50 ] && { echo "skip mixtral $w: out of time"; continue; }
  timeout $(( $(left) - 8 )) $C/bin/kvtier bench --workload $w --model $X --weight-dtype fp8 --kv-dtype fp8 \
    --ceilings $R/ceilings.txt --json $R/mixtral-fp8-$w.json --commit "$(cat $C/COMMIT)" --time-limit 60 \
    > $R/mixtral-fp8-$w.txt 2>&1
  echo "[$(el) s] mixtral $w rc=$?"; grep -E "^W[12] " $R/mixtral-fp8-$w.txt | cut -c1-150
done
tar czf $OUT/c5.tgz -C /tmp r
