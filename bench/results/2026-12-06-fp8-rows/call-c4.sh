#!/usr/bin/env bash
# Call C4: (1) fp8_activation_rows (its byte check fixed) and the GPU tests the spread and the
# hardware conversion touch: kvtier_cuda_fp8_test, kvtier_cuda_backend_test (every preset and
# fp8 path against the CPU), kvtier_cuda_parity_test (the transformers goldens); (2) W2 and W1 in
# fp8 weights + fp8 KV through `kvtier bench`, old (main before the change, 7b5792b's build) and
# new alternating, with this call's ceilings; (3) issue #41: Mixtral 8x7B in fp8 weights
# (compressed-tensors per channel) + fp8 KV end to end, W1 and W2, same ceilings.
# Carry c4: scripts/device-carry.sh .carry/c4/new <main's kvtier, libkvtier_cuda.so, the three
#   test programs, fp8_rows_new>; .carry/c4/old/{bin/kvtier, lib/libkvtier_cuda.so} (C1's old);
#   ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar | xz --x86.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=c4 . bench/results/device-call-prelude.sh
unset KVTIER_CUDA_MODULE
N=$C/new
export LD_LIBRARY_PATH=$N/lib:/usr/local/cuda/lib64
export KVTIER_CUDA_MODULE=$N/lib/libkvtier_cuda.so
cp $C/SOURCE_DIR $N/SOURCE_DIR
C=$N link_source_dir
M=/tmp/kb/llama3-8b X=/tmp/kb/mixtral-8x7b-fp8
mkdir -p /tmp/kb
( $N/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1
  $N/bin/kvtier mkmodel --preset mixtral-8x7b --fp8 ct-channel --out $X > $R/mkmodel-mixtral.txt 2>&1 ) &
mk=$!
timeout 60 $N/bin/fp8_rows_new > $R/fp8_rows_new.txt 2>&1; echo "[$(el) s] fp8_rows_new rc=$?"
grep -A10 "^GatedMulFp8" $R/fp8_rows_new.txt | cut -c1-140; tail -1 $R/fp8_rows_new.txt
t fp8_test 40 $N/bin/kvtier_cuda_fp8_test
t backend_test 150 $N/bin/kvtier_cuda_backend_test
t parity_test 60 $N/bin/kvtier_cuda_parity_test
tar czf $OUT/c4.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodels rc=$? $(tail -1 $R/mkmodel-mixtral.txt | cut -c1-100)"
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
echo "[$(el) s] ceilings $(head -c 120 $R/ceilings.txt)"
unset KVTIER_CUDA_MODULE   # each build loads the CUDA module next to its own program
for round in 1 2; do
  order="old new"; [ $round = 2 ] && order="new old"
  for which in $order; do
    [ "$(left)" -lt 150 ] && break
    LD_LIBRARY_PATH=$C/$which/lib:$N/lib:/usr/local/cuda/lib64 timeout 60 $C/$which/bin/kvtier bench \
      --workload W1,W2 --model $M --weight-dtype fp8 --kv-dtype fp8 --ceilings $R/ceilings.txt \
      --json $R/w12-fp8-$which-$round.json --time-limit 40 > $R/w12-fp8-$which-$round.txt 2>&1
    echo "[$(el) s] $which $round rc=$?"; grep -E "^W[12] .*decode" $R/w12-fp8-$which-$round.txt | cut -c1-110
  done
done
tar czf $OUT/c4.tgz -C /tmp r
rm -rf $M
export KVTIER_CUDA_MODULE=$N/lib/libkvtier_cuda.so
for w in W1 W2; do
  [ "$(left)" -lt 50 ] && { echo "skip mixtral $w: out of time"; continue; }
  timeout $(( $(left) - 8 )) $N/bin/kvtier bench --workload $w --model $X --kv-dtype fp8 --ceilings $R/ceilings.txt \
    --json $R/mixtral-fp8-$w.json --commit "$(cat $C/COMMIT)" --time-limit 50 > $R/mixtral-fp8-$w.txt 2>&1
  echo "[$(el) s] mixtral $w rc=$?"; grep -E "^W[12] " $R/mixtral-fp8-$w.txt | cut -c1-150
done
tar czf $OUT/c4.tgz -C /tmp r
