#!/usr/bin/env bash
# Call A: the MoE decode path (MoeTile::kGemvFused: router + top-k, gate|up per route,
# down + combine, three PDL-launched kernels) on a GPU for the first time: its kernel tests
# (kvtier_cuda_moe_test: bit-exact against the grouped path, CPU agreement, graph replay) and
# the whole models through it (kvtier_cuda_parity_test's MoE goldens); kvtier_cuda_moe_bench
# (fused against grouped at 1 and 2 rows, Qwen3-30B-A3B and Mixtral shapes, bf16 and fp8
# experts, HBM ceiling of the same run); then a random Qwen3-30B-A3B checkpoint (fp8 ct-channel on disk) through W1 in
# bf16 with the ceilings of the same call (issue #41's figure: W1 decode against its limit).
# Carry a: scripts/device-carry.sh .carry/a <kvtier, libkvtier_cuda.so, kvtier_cuda_{moe,parity}_test,
#   kvtier_cuda_moe_bench>; ../shared/anchors; COMMIT; SOURCE_DIR; strip; tar cJf.
rm -rf /tmp/r
BUDGET=${BUDGET:-575} CARRY=a . bench/results/device-call-prelude.sh
Q=/tmp/kb/qwen3-30b-a3b
mkdir -p /tmp/kb
$C/bin/kvtier mkmodel --preset qwen3-30b-a3b --fp8 ct-channel --out $Q > $R/mkmodel-qwen3moe.txt 2>&1 &
link_source_dir
use_torch_libraries
pack() { tar czf $OUT/a.tgz -C /tmp r; }
t moe 60 $C/bin/kvtier_cuda_moe_test
pack
timeout $(( $(left) < 130 ? $(left) - 10 : 120 )) $C/bin/kvtier_cuda_moe_bench ${MOE_SHAPE:-} > $R/moe_bench.txt 2>&1
echo "[$(el) s] moe_bench rc=$?"; grep -E "^HBM|rows +[12] .*tile (auto|gemv)" $R/moe_bench.txt | cut -c1-150
pack
t parity 60 $C/bin/kvtier_cuda_parity_test
pack
if [ "$(left)" -gt 150 ]; then
  timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings rc=$?"
  wait; echo "[$(el) s] qwen3moe: $(tail -1 $R/mkmodel-qwen3moe.txt)"
  timeout $(( $(left) - 5 )) $C/bin/kvtier bench --workload W1 --model $Q --weight-dtype bf16 --ceilings $R/ceilings.txt \
    --json $R/qwen3moe.json --commit "$(cat $C/COMMIT)" --time-limit 60 > $R/qwen3moe.txt 2>&1
  echo "[$(el) s] qwen3moe rc=$?"; grep -E "^W1 " $R/qwen3moe.txt | cut -c1-160 | head -6
fi
pack
kill $(jobs -p) 2>/dev/null
