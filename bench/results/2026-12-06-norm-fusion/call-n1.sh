#!/usr/bin/env bash
# Call N1: the decode GEMVs that norm their own input and add their output into the residual
# (src/backend/cuda/gemv_fusion.h, cuda_decode_norm_fusion) on a GPU for the first time: the
# kernel tests (bit-exact against AddRmsNorm + the plain GEMVs), the backend's fused cases
# against the CPU, then whole graph steps (kvtier_cuda_bench KVTIER_BENCH_QUICK: W1 at one row,
# W2 at 64 rows, random Llama-3-8B weights) with the fusion off and on, alternating, bf16 and
# fp8 weights + fp8 KV; the ceilings.
# First, branch cuda-groups' grouped-KV controls (bin/cg_backend_test, built on the branch): each
# case grouped and on one group must give the GPU the same bits; the cases against the CPU.
# Then the MoE decode path's residual output (kvtier_cuda_moe_test).
# Carry nf: scripts/device-carry.sh .carry/nf <kvtier_cuda_bench, kvtier_cuda_kernels_test,
#   kvtier_cuda_backend_test, kvtier_cuda_moe_test, libkvtier_cuda.so>, plus the branch's
#   kvtier_cuda_backend_test as bin/cg_backend_test; ../shared/anchors; COMMIT; SOURCE_DIR;
#   strip --strip-all the programs; tar cJf.
rm -rf /tmp/r
BUDGET=${BUDGET:-400} CARRY=nf . bench/results/device-call-prelude.sh
link_source_dir
use_torch_libraries
pack() { tar czf $OUT/n1.tgz -C /tmp r; }
t cg-onegroup 60 $C/bin/cg_backend_test --gtest_filter='Cases/CudaGroupedKvTest.OneGroupGivesTheGpuTheSameBits/*'
t cg-grouped 60 $C/bin/cg_backend_test --gtest_filter='Cases/CudaGroupedKvTest.MatchesTheCpuBackendOnTheSameGroups/*'
pack
t moe 60 $C/bin/kvtier_cuda_moe_test
t fusion 60 $C/bin/kvtier_cuda_kernels_test --gtest_filter='GemvFusion*'
pack
t backend 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='Presets/*'
pack
for round in 1 2; do
  for d in fp8 bf16; do
    for f in 0 1; do
      [ "$(left)" -lt 30 ] && break
      KVTIER_CUDA_DECODE_NORM_FUSION=$f KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=$d KVTIER_BENCH_KV_DTYPE=$d \
        timeout 60 $C/bin/kvtier_cuda_bench > $R/quick-$d-f$f-r$round.txt 2>&1
      echo "[$(el) s] $d fusion=$f round $round: $(grep -E 'W1 decode' $R/quick-$d-f$f-r$round.txt | cut -c1-90)"
    done
  done
  pack
done
timeout 40 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1; echo "[$(el) s] ceilings rc=$?"
pack
# The decode attention alone per shape and split count (W1's one row at 600 positions
# included: 11 us a layer under ncu, latency rather than bytes).
if [ "$(left)" -gt 60 ]; then
  KVTIER_DECODE_BENCH=1 timeout $(( $(left) - 10 )) $C/bin/kvtier_cuda_bench > $R/decode_attention.txt 2>&1
  echo "[$(el) s] decode bench rc=$?"; grep -E "^\[decode-bench\] W1" $R/decode_attention.txt | cut -c1-160 | head -12
fi
pack
