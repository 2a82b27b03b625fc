#!/usr/bin/env bash
# Call F1 (issue #41): fp8 experts on the MoE library path (W8A8 on cuBLASLt, moe_library.h).
#  1. kvtier_cuda_moe_test (the fp8 library path against the CPU within the W8A8 bound) and the
#     backend's presets against the CPU backend;
#  2. kvtier_cuda_moe_bench mixtral and qwen3: one MLP per tile and rows, the fp8 library path
#     and the 16-bit experts' grouped GEMMs (MoeRun::library_grouped) included;
#  3. Mixtral 8x7B, fp8 weights + fp8 KV: kvtier_cuda_bench's prefill steps (KVTIER_BENCH_PREFILL)
#     before the change (kvtier_cuda_bench_old, the parent commit) and after, in the order
#     old, new, new, old, each its own process;
#  4. `kvtier bench --workload W1` on a Mixtral 8x7B fp8 checkpoint (mkmodel into /dev/shm,
#     started first in the background) with this call's ceilings.
# Carry f1: scripts/pack-carry.sh f1 build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#   build/tests/backend_cuda/{kvtier_cuda_moe_test,kvtier_cuda_moe_bench,kvtier_cuda_backend_test,kvtier_cuda_bench}
#   /work/old/build/tests/backend_cuda/kvtier_cuda_bench=kvtier_cuda_bench_old
rm -rf /tmp/r
BUDGET=${BUDGET:-585} CARRY=f1 . bench/results/device-call-prelude.sh; link_source_dir
X=/dev/shm/mixtral-8x7b-fp8
$C/bin/kvtier mkmodel --preset mixtral-8x7b --fp8 ct-channel --threads 8 --out $X > $R/mkmodel-mixtral.txt 2>&1 &
mk=$!
t moe 90 $C/bin/kvtier_cuda_moe_test
grep "\[w8a8\]" $R/tests/moe.txt | sort -k5 -t' ' | tail -3
t backend_moe 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Preset*:*Moe*:*Mixtral*:*Qwen3*'
for sh in mixtral qwen3; do
  timeout 100 $C/bin/kvtier_cuda_moe_bench $sh > $R/moe_bench_$sh.txt 2>&1
  echo "[$(el) s] moe bench $sh rc=$?"
  grep -E "rows +(64|512|2048) tile (auto|cublas|grouped|64x64|16x16 )" $R/moe_bench_$sh.txt | cut -c20-100
done
tar czf $OUT/f1.tgz -C /tmp r
prefill() {  # prefill NAME BINARY
  KVTIER_BENCH_PREFILL=1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 KVTIER_BENCH_KV_DTYPE=fp8 timeout 100 $C/bin/$2 mixtral-8x7b \
    > $R/prefill-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -iE "prefill" $R/prefill-$1.txt | tr -s ' ' | cut -c1-60 | tr '\n' '|')"
}
prefill old-1 kvtier_cuda_bench_old; prefill new-1 kvtier_cuda_bench
prefill new-2 kvtier_cuda_bench; prefill old-2 kvtier_cuda_bench_old
tar czf $OUT/f1.tgz -C /tmp r
wait $mk; echo "[$(el) s] mkmodel rc=$? $(tail -1 $R/mkmodel-mixtral.txt | cut -c1-100)"
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings $(grep RESULT $R/ceilings.txt | cut -c1-80)"
[ "$(left)" -gt 60 ] && { timeout $(( $(left) - 8 )) $C/bin/kvtier bench --workload W1 --model $X --weight-dtype fp8 \
  --kv-dtype fp8 --ceilings $R/ceilings.txt --json $R/mixtral-fp8-W1.json --commit "$(cat $C/COMMIT)" \
  --time-limit 60 > $R/mixtral-fp8-W1.txt 2>&1
  echo "[$(el) s] mixtral W1 rc=$?"; grep -E "^W1 |weights 43" $R/mixtral-fp8-W1.txt | cut -c1-150; }
tar czf $OUT/f1.tgz -C /tmp r
