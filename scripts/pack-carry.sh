#!/usr/bin/env bash
# Packs built programs into one archive for a device call (.carry/NAME.txz, passed as the run's
# carry): scripts/device-carry.sh's folder (the programs and the Debian libraries a GPU
# machine lacks), ../shared/anchors, COMMIT (this checkout's HEAD), SOURCE_DIR (where the test
# programs look for tests/parity), stripped, under xz. A program carried under another name
# is given as FILE=NAME (kvtier_cuda_bench=kvtier_cuda_bench_a).
# usage (repository root): scripts/pack-carry.sh NAME FILE[=NAME]...
# bench/results/device-call-prelude.sh unpacks it on the device (CARRY=NAME).
set -euo pipefail
name=${1:?usage: scripts/pack-carry.sh NAME FILE[=NAME]...}
shift
dest=.carry/$name
rm -rf "$dest" "$dest.txz"
mkdir -p "$dest"
for spec in "$@"; do
  file=${spec%%=*}
  [ -f "$file" ] || { echo "pack-carry: no file $file" >&2; exit 1; }
  if [ "$spec" != "$file" ]; then
    mkdir -p "$dest/renamed"
    cp -L "$file" "$dest/renamed/${spec#*=}"
    file=$dest/renamed/${spec#*=}
  fi
  scripts/device-carry.sh "$dest" "$file" > /dev/null
done
rm -rf "$dest/renamed"
cp -r ../shared/anchors "$dest/"
git rev-parse --short HEAD > "$dest/COMMIT"
pwd > "$dest/SOURCE_DIR"
strip --strip-all "$dest"/bin/* 2>/dev/null || true
strip --strip-unneeded "$dest"/lib/* 2>/dev/null || true
(cd .carry && tar cf - "$name" | xz --x86 --lzma2=preset=9e,dict=192MiB -T2 > "$name.txz")
ls -la "$dest.txz"
