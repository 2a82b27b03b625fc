# What every device-call script under bench/results/ starts with, sourced from the repository
# root on the GPU machine: `CARRY=a . bench/results/device-call-prelude.sh` unpacks
# .carry/$CARRY.txz (scripts/device-carry.sh's folder, with anchors/ and COMMIT) and sets
#   C   the unpacked carry folder, its programs in $C/bin and libraries in $C/lib;
#   R   /tmp/r, where the call writes what it brings back (the script tars it into $OUT);
#   el  a function printing the seconds since the call began;
# and the environment the programs run with. Writes $R/machine.txt. scripts/pack-carry.sh
# makes the archive.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf ".carry/${CARRY:?CARRY names the carry archive}.txz" -C /tmp/c
C=/tmp/c/$CARRY
R=/tmp/r
mkdir -p "$R"
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$R/machine.txt"

# left: the seconds left of $BUDGET (default 578: a call's 600 less a margin to pack).
left() { echo $(( ${BUDGET:-578} - $(el) )); }
# t NAME LIMIT PROGRAM...: runs a test program into $R/tests/NAME.txt for at most LIMIT
# seconds (and what is left of the budget), then prints its passed, skipped and failed tests.
t() {
  local name=$1 lim=$2; shift 2
  [ "$(left)" -lt 15 ] && { echo "skip $name: out of time"; return; }
  [ "$lim" -gt "$(left)" ] && lim=$(left)
  mkdir -p "$R/tests"
  timeout "$lim" "$@" > "$R/tests/$name.txt" 2>&1
  local rc=$?
  echo "[$(el) s] $name rc=$rc $(grep -cE '^\[       OK \]' "$R/tests/$name.txt") ok" \
    "$(grep -cE '^\[  SKIPPED \]' "$R/tests/$name.txt") skipped," \
    "$(grep -E '^\[  FAILED  \] [A-Za-z]' "$R/tests/$name.txt" | sort -u | cut -c1-100 | tr '\n' ' ')"
}
# use_torch_libraries: cuDNN and NCCL from torch's wheels, wherever pip put them
# (KVTIER_CUDNN_LIBRARY, KVTIER_NCCL_LIBRARY; cuDNN's folder on the library path for its own
# sub-libraries; NVLink multicast off).
use_torch_libraries() {
  local site
  site=$(python3 -c 'import site;print(" ".join(site.getsitepackages()))')
  KVTIER_CUDNN_LIBRARY=$(find $site -name 'libcudnn.so.9' 2>/dev/null | head -1)
  KVTIER_NCCL_LIBRARY=$(find $site -name 'libnccl.so.2' 2>/dev/null | head -1)
  export KVTIER_CUDNN_LIBRARY KVTIER_NCCL_LIBRARY NCCL_NVLS_ENABLE=0
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "${KVTIER_CUDNN_LIBRARY:-/x/y}")
  echo "cuDNN: ${KVTIER_CUDNN_LIBRARY:-none}; NCCL: ${KVTIER_NCCL_LIBRARY:-none}"
}
# link_source_dir: the test programs read tests/parity/*.json under the source folder they
# were built in ($C/SOURCE_DIR); where that path is not this checkout, it becomes a link to it.
link_source_dir() {
  local src
  src=$(cat "$C/SOURCE_DIR")
  [ -f "$src/tests/parity/moe_goldens.json" ] || { mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; }
  export KVTIER_CLI=$C/bin/kvtier
}
# w4_prefill_attention SETTING...: W4 (32k, bf16) on the checkpoint $M once per
# KVTIER_CUDA_PREFILL_ATTENTION setting, each in its own process, with $R/ceilings.txt; JSON and
# table as $R/w4-SETTING.*, and what ran the prefill attention.
w4_prefill_attention() {
  local a
  for a in "$@"; do KVTIER_CUDA_PREFILL_ATTENTION=$a kbench "w4-$a" W4; done
  grep -ho '"prefill_attention": *"[^"]*"' "$R"/w4-*.json 2>/dev/null | cut -c1-300
}
# quick_step NAME PROGRAM PRESET [VAR=VALUE...]: a kvtier_cuda_bench PROGRAM's graph decode
# steps (KVTIER_BENCH_QUICK=1) on PRESET with the VARs set, into $R/quick-NAME.txt; prints
# its graph-step lines.
quick_step() {
  local name=$1 program=$2 preset=$3; shift 3
  [ "$(left)" -lt 20 ] && { echo "skip $name: out of time"; return; }
  env KVTIER_BENCH_QUICK=1 "$@" timeout 60 "$program" "$preset" > "$R/quick-$name.txt" 2>&1
  local rc=$?
  echo "[$(el) s] $name rc=$rc $(grep -E "decode.*graph" "$R/quick-$name.txt" | tr -s ' ' | cut -c1-70 | tr '\n' ' ')"
}
# kbench NAME WORKLOAD [FLAGS...]: `kvtier bench` ($C/bin/kvtier) of one workload on the
# checkpoint $M with $R/ceilings.txt, in its own process, into $R/NAME.{json,txt}; prints its
# table rows and each prefill chunk's milliseconds (prefill_step_s, W4 and W8).
kbench() {
  local name=$1 w=$2; shift 2
  [ "$(left)" -lt 60 ] && { echo "skip $name: out of time"; return; }
  local lim=$(( $(left) - 5 )); [ $lim -gt 120 ] && lim=120
  timeout $lim "$C/bin/kvtier" bench --workload "$w" --model "$M" --ceilings "$R/ceilings.txt" \
    --json "$R/$name.json" --commit "$(cat "$C/COMMIT")" --time-limit 60 "$@" > "$R/$name.txt" 2>&1
  echo "[$(el) s] $name rc=$?"; grep -E "^W[0-9]+ " "$R/$name.txt" | cut -c1-110 | head -4
  python3 -c "import json,sys;ws=json.load(open(sys.argv[1]))['workloads']
for k in sys.argv[2].split(','):
  s=ws.get(k,{}).get('prefill_step_s',[])
  if s: print(k,len(s),'chunks, ms:',' '.join('%.0f'%(x*1e3) for x in s))" \
    "$R/$name.json" "$w" 2>&1 | cut -c1-600
}
