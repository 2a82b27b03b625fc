#!/usr/bin/env bash
# Call M: the CUDA mixture-of-experts MLP (issue 41), written without a GPU, checked for the
# first time: its kernel and layer tests against the CPU backend (also under compute-sanitizer
# where the machine has it), the Mixtral and Qwen3-MoE presets of the backend test, the MoE
# goldens through the CUDA backend, and kvtier_cuda_moe_bench (Qwen3-30B-A3B and Mixtral shapes
# at 1, 64 and 2048 rows, bf16 and fp8 experts, every tile, against the HBM ceiling).
# Carry (from the build directory of the commit under test, configured as docs say):
#   ninja kvtier_cli kvtier_cuda kvtier_cuda_moe_test kvtier_cuda_backend_test
#     kvtier_cuda_parity_test kvtier_cuda_moe_bench;
#   scripts/device-carry.sh .carry/m build/tools/kvtier/kvtier build/src/backend/cuda/libkvtier_cuda.so
#     build/tests/backend_cuda/kvtier_cuda_{moe,backend,parity}_test build/tests/backend_cuda/kvtier_cuda_moe_bench;
#   git rev-parse --short HEAD > .carry/m/COMMIT; pwd > .carry/m/SOURCE_DIR; strip; tar cJf .carry/m.txz.
CARRY=m . bench/results/device-call-prelude.sh
# The parity test reads tests/parity/ under the source directory it was built in: point that
# path at this copy of the tree when it is not there.
SRC=$(cat $C/SOURCE_DIR)
[ -f "$SRC/tests/parity/moe_goldens.json" ] || { mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; }
# The tests turn the unverified-experts switch on themselves; the CLI writes the checkpoints.
export KVTIER_CLI=$C/bin/kvtier
mkdir -p $R/tests
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; echo "[$(el) s] $name rc=$? $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"; }
t moe 120 $C/bin/kvtier_cuda_moe_test
t backend-moe 180 $C/bin/kvtier_cuda_backend_test --gtest_filter='*mixtral*:*qwen3moe*'
t parity 120 $C/bin/kvtier_cuda_parity_test
grep -hE "Failure" -A6 $R/tests/*.txt | head -40
grep -hE "^\[(tiny-mixtral|tiny-qwen3moe)|^\[cuda parity\]" $R/tests/*.txt | cut -c1-150
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SAN" ]; then
  t moe-memcheck 150 $SAN --tool memcheck --error-exitcode 9 $C/bin/kvtier_cuda_moe_test \
    --gtest_filter='MoeKernelsTest.GroupRoutes*:MoeKernelsTest.ExpertGemm*:MoeLayerTest.ReplaysAsACapturedGraph'
  grep -E "ERROR SUMMARY|Invalid" $R/tests/moe-memcheck.txt | head -10
fi
timeout $(( 590 - $(el) )) $C/bin/kvtier_cuda_moe_bench > $R/moe_bench.txt 2>&1
echo "[$(el) s] moe bench rc=$?"
grep -E "^HBM|^moe .* tile auto " $R/moe_bench.txt | cut -c1-170
tar czf $OUT/m.tgz -C /tmp r
