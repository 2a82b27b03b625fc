#!/usr/bin/env bash
# The device calls of this folder, as they ran (each on a warm H100 after the one before; the
# carries are scripts/pack-carry.sh archives of the programs named, built at the commit each
# machine.txt's README line gives). Run one with CALL=m4|m5|m6|m7 from the repository root.
#   m4: carry h3 (../2026-12-07-w6-steps/build-h3.sh, with build/cudnn_moe): the probe with int32
#       indices under compute-sanitizer, then once more with cuDNN's API log;
#   m5: carry m5 (build/cudnn_moe alone): the probe with int64 indices (then KVTIER_MOE_INDEX64=1,
#       now the probe's default);
#   m6: carry m6 (kvtier_cuda_moe_test, kvtier_cuda_moe_bench): the tests, then the bench on both
#       shapes with the library path named (MoeTile::kLibrary);
#   m7: carry m7 (the same and kvtier_cuda_backend_test): the tests with kAuto picking the library,
#       the backend's MoE presets against the CPU, the Mixtral bench.
rm -rf /tmp/r
case ${CALL:?CALL=m4|m5|m6|m7} in
  m4)
    BUDGET=100 CARRY=h3 . bench/results/device-call-prelude.sh; use_torch_libraries > /dev/null
    timeout 60 compute-sanitizer --print-limit 2 $C/bin/cudnn_moe > $R/moe-sanitizer.txt 2>&1
    CUDNN_LOGDEST_DBG=$R/cudnn-log.txt CUDNN_LOGLEVEL_DBG=3 timeout 30 $C/bin/cudnn_moe > $R/moe-log-run.txt 2>&1
    tar czf $OUT/moe.tgz -C /tmp r ;;
  m5)
    BUDGET=200 CARRY=m5 . bench/results/device-call-prelude.sh; use_torch_libraries > /dev/null
    KVTIER_MOE_INDEX64=1 timeout 150 $C/bin/cudnn_moe > $R/cudnn_moe64.txt 2>&1
    tar czf $OUT/m5.tgz -C /tmp r ;;
  m6)
    BUDGET=230 CARRY=m6 . bench/results/device-call-prelude.sh; link_source_dir
    t moe 100 $C/bin/kvtier_cuda_moe_test
    for sh in mixtral qwen3; do timeout $(( $(left) - 10 )) $C/bin/kvtier_cuda_moe_bench $sh > $R/moe_bench_$sh.txt 2>&1; done
    tar czf $OUT/m6.tgz -C /tmp r ;;
  m7)
    BUDGET=150 CARRY=m7 . bench/results/device-call-prelude.sh; link_source_dir
    t moe 60 $C/bin/kvtier_cuda_moe_test
    t backend_moe 80 $C/bin/kvtier_cuda_backend_test --gtest_filter='*Preset*:*Moe*:*Mixtral*:*Qwen3*'
    timeout 30 $C/bin/kvtier_cuda_moe_bench mixtral > $R/moe_bench_mixtral.txt 2>&1
    tar czf $OUT/m7.tgz -C /tmp r ;;
esac
