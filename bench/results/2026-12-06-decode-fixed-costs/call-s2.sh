#!/usr/bin/env bash
# Call S2 (call N4 of ../2026-12-06-moe-route-norm/next/; issue #41, Qwen3-30B-A3B W1 at about 0.63 of its limit in bf16): why the
# decode path's down+combine takes 22.9 µs a layer where call M2's build of the same design
# took 18.0 (README), and where the attention block's projections lose against the copy
# ceiling (qkv 11.8 µs for 21 MB, o 10.7 µs for 17 MB). ncu's full sections (registers and
# spills, occupancy, memory workload, warp stall reasons) on one launch each, inside one W1
# graph step of kvtier_cuda_bench (KVTIER_BENCH_PROFILE=w1, weights generated on the device),
# bf16 then fp8 for the down+combine. Then (issue #34) the W8A8 skinny projection of a Llama-3-8B
# W2 fp8 step at 64 rows, o and gate_up (the TMA pipeline's fixed cost a call). Carry s1: build-s1.sh (main's kvtier_cuda_bench, _a).
rm -rf /tmp/r
BUDGET=${BUDGET:-560} CARRY=${CARRY:-s1} . bench/results/device-call-prelude.sh
full() {  # full NAME REGEX SKIP DTYPE [PRESET PROFILE]: one launch of the kernels matching REGEX after SKIP of them
  [ "$(left)" -lt 40 ] && { echo "skip $1: out of time"; return; }
  KVTIER_BENCH_PROFILE=${6:-w1} KVTIER_BENCH_WEIGHT_DTYPE=$4 timeout $(( $(left) > 130 ? 120 : $(left) - 10 )) \
    ncu --clock-control none --profile-from-start off --set full -k "regex:$2" --launch-skip $3 --launch-count 1 \
    $C/bin/kvtier_cuda_bench_a ${5:-qwen3-30b-a3b} > $R/ncu-full-$1.txt 2>&1
  echo "[$(el) s] ncu $1 rc=$?"
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Local Memory|Theoretical Occupancy|Stall" \
    $R/ncu-full-$1.txt | head -14
  tar czf $OUT/s2.tgz -C /tmp r
}
full down-bf16 DownCombineChunkedKernel 0 bf16
full down-fp8 DownCombineChunkedKernel 0 fp8
full qkv-bf16 'gemv::Kernel|^Kernel$' 0 bf16   # the first gemv::Kernel of a layer is qkv, the second o
full o-bf16 'gemv::Kernel|^Kernel$' 1 bf16
full w8a8-o-w2 SkinnyTmaKernel 1 fp8 llama3-8b w2
full w8a8-gateup-w2 SkinnyTmaKernel 2 fp8 llama3-8b w2
