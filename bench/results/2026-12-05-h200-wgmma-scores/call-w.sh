#!/usr/bin/env bash
# Call W: the wgmma prefill attention's scored instances (issue 41: Gemma's scale, Gemma 2's
# soft-cap, sliding windows, with the KV tiles before every row's window skipped), written
# without a GPU, checked for the first time behind KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1:
# the kernel against the host reference (every variant, NaN rows wherever no kernel may read),
# fp8 KV against the CPU on the same bytes, the Gemma model cases against the CPU backend with
# the switch on and off (compute_path must name wgmma with it, mma without), the plain prefill
# tests without the switch, memcheck where the machine has compute-sanitizer, and the timing of
# one Gemma-scored layer (mma.sync = without the switch, wgmma = with it) at 8k and 32k tokens
# with windows 1024 and 4096.
# Carry (from the build directory of the commit under test, configured as docs say):
#   ninja kvtier_cuda kvtier_cuda_prefill_test kvtier_cuda_fp8_test kvtier_cuda_backend_test;
#   scripts/device-carry.sh .carry/w build/src/backend/cuda/libkvtier_cuda.so
#     build/tests/backend_cuda/kvtier_cuda_{prefill,fp8,backend}_test;
#   git rev-parse --short HEAD > .carry/w/COMMIT; strip; tar cJf .carry/w.txz.
CARRY=w . bench/results/device-call-prelude.sh
mkdir -p $R/tests
# Each step's limit is cut to what is left of 570 s, so that the results are always packed.
t() {
  local name=$1 lim=$2; shift 2
  (( lim > 570 - $(el) )) && lim=$(( 570 - $(el) ))
  (( lim > 0 )) || { echo "[$(el) s] $name not run: no time left"; return; }
  timeout $lim "$@" > $R/tests/$name.txt 2>&1
  local rc=$?
  echo "[$(el) s] $name rc=$rc $(grep -cE '^\[       OK \]' $R/tests/$name.txt) ok $(grep -cE '^\[  SKIPPED \]' $R/tests/$name.txt) skipped, $(grep -E '^\[  FAILED  \] [A-Za-z]' $R/tests/$name.txt | cut -c1-110 | tr '\n' ' ')"
}
ON="env KVTIER_CUDA_WGMMA_SCORES_UNVERIFIED=1"
# Every Gemma case with the switch; without it, those at head_dim 128, the ones the switch moves
# onto the wgmma kernel (compute_path checked both ways).
t prefill-scores 150 $ON $C/bin/kvtier_cuda_prefill_test --gtest_filter='*PrefillWgmmaScoresTest*:*PrefillAttentionScoresTest*'
t fp8-prefill 150 $ON $C/bin/kvtier_cuda_fp8_test --gtest_filter='*KvFp8AttentionTest.Prefill*'
t backend-gemma-on 120 $ON $C/bin/kvtier_cuda_backend_test --gtest_filter='*gemma*'
t backend-gemma-off 90 $C/bin/kvtier_cuda_backend_test --gtest_filter='*gemma*_hd128*'
grep -hE "Failure" -A6 $R/tests/*.txt | head -40
grep -hE "^\[tiny-gemma" $R/tests/backend-gemma-*.txt | cut -c1-140
t timing 100 $ON $C/bin/kvtier_cuda_prefill_test --gtest_filter='Gemma/PrefillWindowTiming.*'
grep -hE "^\[prefill-window\]" $R/tests/timing.txt | cut -c1-170
t prefill-plain 60 $C/bin/kvtier_cuda_prefill_test --gtest_filter='-*Timing*:*PrefillWgmmaScoresTest*'
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SAN" ]; then
  t prefill-memcheck 90 $ON $SAN --tool memcheck --error-exitcode 9 $C/bin/kvtier_cuda_prefill_test \
    --gtest_filter='Shapes/PrefillWgmmaScoresTest.*/0'
  grep -E "ERROR SUMMARY|Invalid" $R/tests/prefill-memcheck.txt | head -10
fi
tar czf $OUT/w.tgz -C /tmp r
