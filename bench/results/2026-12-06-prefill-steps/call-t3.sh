#!/usr/bin/env bash
# Call T3: GatedMulFp8 at a prefill chunk's rows (issue #37/#34: 125 us a layer at 2,048 rows in
# call T2's profile, 1.17 TB/s, where the bf16 GatedMul ran 3.26 TB/s). The micro-benchmark
# sweeps one CTA a row against clusters of 2, 4 and 8 up to 2,048 rows (from HBM), checking
# every spread's bytes against the one-CTA kernel's; then W8 and W4 in fp8 weights + fp8 KV with
# the committed module against the modules that spread prefill rows over 2 or 4 CTAs
# (KVTIER_CUDA_MODULE), in one order and then the reverse.
# Carry t3: build-t3.sh.
rm -rf /tmp/r
BUDGET=${BUDGET:-570} CARRY=${CARRY:-t3} . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
timeout 90 $C/bin/fp8_activation_rows > $R/fp8_activation_rows.txt 2>&1; echo "[$(el) s] micro rc=$?"
sed -n '/GatedMulFp8/,$p' $R/fp8_activation_rows.txt | head -24
timeout 60 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
wait; echo "[$(el) s] ceilings + model: $(tail -1 $R/mkmodel.txt | cut -c1-100)"
use_torch_libraries
tar czf $OUT/t3.tgz -C /tmp r
for round in 1 2; do
  order="main s2 s4"; [ $round = 2 ] && order="s4 s2 main"
  for v in $order; do
    lib=$C/lib/libkvtier_cuda.so; [ $v != main ] && lib=$C/lib/libkvtier_cuda_$v.so
    KVTIER_CUDA_MODULE=$lib kbench w8-fp8-$v-$round W8 --weight-dtype fp8 --kv-dtype fp8
    tar czf $OUT/t3.tgz -C /tmp r
  done
done
for v in main s2; do
  lib=$C/lib/libkvtier_cuda.so; [ $v != main ] && lib=$C/lib/libkvtier_cuda_$v.so
  KVTIER_CUDA_MODULE=$lib kbench w1-fp8-$v W1 --weight-dtype fp8 --kv-dtype fp8
  tar czf $OUT/t3.tgz -C /tmp r
done
# On an H200, the committed module's figures that #34 and #37 name as H200 targets.
if grep -q H200 $R/machine.txt; then
  kbench w2-fp8-h200 W2 --weight-dtype fp8 --kv-dtype fp8; tar czf $OUT/t3.tgz -C /tmp r
  kbench w4-bf16-h200 W4; tar czf $OUT/t3.tgz -C /tmp r
  kbench w2-bf16-h200 W2; tar czf $OUT/t3.tgz -C /tmp r
  kbench w1-bf16-h200 W1; tar czf $OUT/t3.tgz -C /tmp r
fi
