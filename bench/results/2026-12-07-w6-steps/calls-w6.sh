#!/usr/bin/env bash
# The W6 calls after H3, as they ran on the same warm H100 (carry h3, build-h3.sh), from the
# repository root, with $M and the ceilings H3 left on the machine:
#   w6-default: W6 with its step times (H3's own W6 had no --tier-dir and did not run);
#   w6-repeats: W6 twice more (named cudnn1 / cudnn2: they set KVTIER_CUDA_PREFILL_CUDNN, which
#               the CLI does not read, so both ran the default);
#   w6-cudnn:   KVTIER_CUDA_PREFILL_ATTENTION=cudnn-every-chunk, the default, cudnn-every-chunk.
# usage: CALL=default|repeats|cudnn, as one device call each.
rm -rf /tmp/r
BUDGET=150 CARRY=h3 . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
use_torch_libraries > /dev/null
mkdir -p /tmp/kb/tiers
case ${CALL:?CALL=default|repeats|cudnn} in
  default) kbench w6 W6 --tier-dir /tmp/kb/tiers ;;
  repeats) for v in 2 1; do KVTIER_CUDA_PREFILL_CUDNN=$v kbench w6-cudnn$v W6 --tier-dir /tmp/kb/tiers; done ;;
  cudnn)
    for v in cudnn-every-chunk default cudnn-every-chunk; do
      if [ $v = default ]; then unset KVTIER_CUDA_PREFILL_ATTENTION; else export KVTIER_CUDA_PREFILL_ATTENTION=$v; fi
      kbench w6-$v-$(el) W6 --tier-dir /tmp/kb/tiers
    done ;;
esac
tar czf $OUT/w6.tgz -C /tmp r
