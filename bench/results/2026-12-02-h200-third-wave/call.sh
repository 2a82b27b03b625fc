#!/usr/bin/env bash
# Call B: the merged tree on the H200. Everything lands in /tmp/r, tarred into $OUT at the end.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }; left() { echo $(( ${BUDGET:-570} - $(el) )); }
untar() { tar xf "$1" -C "$2" 2>/dev/null || python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; }
mkdir -p /tmp/c /tmp/f /tmp/r/tests
untar .carry/q/common.txz /tmp/c; untar .carry/q/final.txz /tmp/f
COMMON=/tmp/c/common; C=/tmp/f/final; R=/tmp/r
cp -n $COMMON/lib/* $C/lib/; ln -sfn $COMMON/anchors $C/anchors; ln -sfn $COMMON/redis $C/redis
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
M=/tmp/kb/llama3-8b; COMMIT=$(cat $C/COMMIT)
log() { echo "[$(el) s] $*" | tee -a $R/final.log; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt
( $C/bin/kvtier mkmodel --preset llama3-8b --out $M > $R/mkmodel.txt 2>&1; touch $M.ready ) &
t() { local name=$1 lim=$2; shift 2; timeout $lim "$@" > $R/tests/$name.txt 2>&1; log "$name rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $R/tests/$name.txt | tr '\n' ' ')"; }
. .carry/q/final-steps.sh
log "end"
tar czf $OUT/final.tgz -C /tmp r
