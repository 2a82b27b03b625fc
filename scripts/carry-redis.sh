#!/usr/bin/env bash
# Copies Debian's redis-server and redis-cli with the shared libraries they need (bin/,
# lib/), and kvtier's Redis client library (hiredis/), into DIR, so that a machine without
# the packages (the GPU machine of `kvtier bench` W6c) can run them:
#   scripts/carry-redis.sh DIR
#   LD_LIBRARY_PATH=DIR/lib DIR/bin/redis-server --port 6390 --bind 127.0.0.1 --save '' ...
#   LD_LIBRARY_PATH=DIR/hiredis kvtier bench --workload W6c --remote-kv-url redis://127.0.0.1:6390 ...
# glibc's own libraries (libc, libm, libpthread, libdl, ld-linux) are left out: the target's
# are used.
set -euo pipefail
dir=${1:?usage: scripts/carry-redis.sh DIR}
mkdir -p "$dir/bin" "$dir/lib" "$dir/hiredis"
for program in redis-server redis-cli; do
  cp -L "$(command -v "$program")" "$dir/bin/"
done
{
  ldd "$dir/bin/redis-server" "$dir/bin/redis-cli"
} | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$dir/lib/" ;;
  esac
done
cp -L "$(dpkg -L libhiredis0.14 | grep 'libhiredis.so' | head -1)" "$dir/hiredis/"
du -sh "$dir"
