#!/usr/bin/env bash
# Call T1: where W8's prefill time goes (issue #37: 12.6 s against an 8.54 s limit on an H100,
# 1.47x, target 1.25x), and call S4's TMA tuning in whole W2 fp8 steps (issue #34).
# Carry: build-t1.sh's (.carry/t1.txz): S4's programs plus kvtier of this commit, whose W4 and
# W8 records list each prefill chunk's wall time (prefill_step_s).
# 1. A random Llama-3-8B checkpoint, the ceilings, and the skinny kernel's tests at main.
# 2. W2 fp8 graph steps at KVTIER_SKINNY_TMA=ROW,256,1,LOOKAHEAD, one order then the reverse.
# 3. W4 (32k, all KV on the device) and W8 (128k, most KV streamed from the host) in bf16, each
#    in its own process: chunk times against context say whether the host stream or the
#    attention's rate holds W8 back; W8 in fp8 weights + fp8 KV (all on the device) beside.
rm -rf /tmp/r
BUDGET=${BUDGET:-560} CARRY=${CARRY:-t1} . bench/results/device-call-prelude.sh
M=/tmp/kb/llama3-8b
$C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1 &
timeout 60 python3 $C/anchors/ceilings.py > $R/ceilings.txt 2>&1
t skinny 60 $C/bin/kvtier_cuda_skinny_test_f
wait; echo "[$(el) s] ceilings + model: $(tail -1 $R/mkmodel.txt | cut -c1-100)"
use_torch_libraries
quick() {  # quick NAME ROW LOOKAHEAD
  KVTIER_SKINNY_TMA=$2,256,1,$3 KVTIER_BENCH_QUICK=1 KVTIER_BENCH_WEIGHT_DTYPE=fp8 timeout 60 \
    $C/bin/kvtier_cuda_bench_f llama3-8b > $R/quick-$1.txt 2>&1
  echo "[$(el) s] $1 rc=$? $(grep -E "W2 decode.*graph" $R/quick-$1.txt | tr -s ' ' | cut -c1-70)"
}
for round in 1 2; do
  order="128:4 256:3 256:0 256:2 128:6"
  [ $round = 2 ] && order="128:6 256:2 256:0 256:3 128:4"
  for rl in $order; do
    [ "$(left)" -gt 300 ] && quick r${rl%:*}-l${rl#*:}-$round ${rl%:*} ${rl#*:}
  done
done
tar czf $OUT/t1.tgz -C /tmp r
bench() {  # bench NAME WORKLOAD [FLAGS...]
  local name=$1 w=$2; shift 2
  [ "$(left)" -lt 60 ] && { echo "skip $name: out of time"; return; }
  local lim=$(( $(left) - 5 )); [ $lim -gt 120 ] && lim=120
  timeout $lim $C/bin/kvtier bench --workload $w --model $M --ceilings $R/ceilings.txt \
    --json $R/$name.json --commit "$(cat $C/COMMIT)" --time-limit 60 "$@" > $R/$name.txt 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W[0-9]+ " $R/$name.txt | cut -c1-110 | head -4
  python3 -c "import json,sys;w=json.load(open(sys.argv[1]))['workloads'][sys.argv[2]];s=w.get('prefill_step_s',[]);print(w.get('prefill_attention'),len(s),' '.join('%.0f'%(x*1e3) for x in s))" $R/$name.json $w 2>&1 | cut -c1-600
  tar czf $OUT/t1.tgz -C /tmp r
}
bench w8-bf16 W8
bench w4-bf16 W4
bench w8-fp8 W8 --weight-dtype fp8 --kv-dtype fp8
