# What every device-call script under bench/results/ starts with, sourced from the repository
# root on the GPU machine: `CARRY=a . bench/results/device-call-prelude.sh` unpacks
# .carry/$CARRY.txz (scripts/device-carry.sh's folder, with anchors/ and COMMIT) and sets
#   C   the unpacked carry folder, its programs in $C/bin and libraries in $C/lib;
#   R   /tmp/r, where the call writes what it brings back (the script tars it into $OUT);
#   el  a function printing the seconds since the call began;
# and the environment the programs run with. Writes $R/machine.txt.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/c && tar xJf ".carry/${CARRY:?CARRY names the carry archive}.txz" -C /tmp/c
C=/tmp/c/$CARRY
R=/tmp/r
mkdir -p "$R"
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64 KVTIER_CUDA_MODULE=$C/lib/libkvtier_cuda.so PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$R/machine.txt"
