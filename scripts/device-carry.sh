#!/usr/bin/env bash
# Copies built programs plus the Debian shared libraries they need that a GPU machine's
# image may lack (abseil, ICU, GoogleTest, OpenSSL's libcrypto, hiredis, oneDNN with libgomp and
# libOpenCL) into one folder to carry there; run them with LD_LIBRARY_PATH=<folder>/lib.
# oneDNN is 40 MB (8 MB under xz): a build with -DKVTIER_ONEDNN=OFF carries without it.
# usage: scripts/device-carry.sh DEST FILE...
set -euo pipefail
dest=${1:?usage: scripts/device-carry.sh DEST FILE...}
shift
mkdir -p "$dest/bin" "$dest/lib"
for f in "$@"; do
  case "$f" in
    *.so|*.so.*) cp -L "$f" "$dest/lib/" ;;
    *) cp -L "$f" "$dest/bin/" ;;
  esac
  # A program that needs none of them (a standalone micro-benchmark) is carried as it is.
  ldd "$f" | awk '/=>/ {print $3}' | { grep -E 'libabsl|libicu|libgtest|libgmock|libkvtier|libcrypto|libhiredis|libdnnl|libgomp|libOpenCL' || true; } | while read -r lib; do
    cp -L "$lib" "$dest/lib/" 2>/dev/null || true
  done
done
du -sh "$dest"
