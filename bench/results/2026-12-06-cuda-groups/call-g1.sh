#!/usr/bin/env bash
# Call G1: the CUDA backend reading the layer-group KV layout (branch cuda-groups: per-group
# indptr, windowed tables trimmed to the window, the scratch block before a window) on a GPU
# for the first time: the planner's tests, then the whole backend test (every model's step
# planning changed, the grouped Gemma cases included) and the parity goldens.
# Carry cg: scripts/device-carry.sh .carry/cg <kvtier, libkvtier_cuda.so,
#   kvtier_cuda_{plan,backend,parity}_test> built on the branch; COMMIT; SOURCE_DIR; strip; tar cJf.
rm -rf /tmp/r
BUDGET=${BUDGET:-300} CARRY=cg . bench/results/device-call-prelude.sh
link_source_dir
use_torch_libraries
pack() { tar czf $OUT/g1.tgz -C /tmp r; }
t plan 60 $C/bin/kvtier_cuda_plan_test
pack
t grouped 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='Cases/CudaGroupedKvTest.*:CudaGroupedKvValidationTest.*'
pack
t backend 150 $C/bin/kvtier_cuda_backend_test --gtest_filter='-Cases/CudaGroupedKvTest.*:CudaGroupedKvValidationTest.*'
pack
t parity 60 $C/bin/kvtier_cuda_parity_test
pack
