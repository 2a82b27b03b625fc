#!/usr/bin/env bash
# Builds the Debian packages: libkvtier0, libkvtier-dev, libkvtier-cuda0 (where nvcc
# exists), kvtier-tools, libkvtier-doc (where doxygen exists), and the bindings' packages
# when configured with -DKVTIER_BINDINGS_<LANG>=ON; then checks them with lintian and the
# library with the ABI check.
# usage: scripts/package.sh [BUILD_DIR] [extra cmake args...]   (default BUILD_DIR: build-deb)
# The .deb files land in BUILD_DIR/packages/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-deb}
[ $# -gt 0 ] && shift
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
# Prefix /usr gives the Debian multiarch libdir (lib/<triplet>) and prefix=/usr in kvtier.pc.
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX=/usr -DKVTIER_BUILD_TESTS=OFF "$@"
cmake --build "$build" -j "$(nproc)"
rm -f "$build"/packages/*.deb
(cd "$build" && cpack -G DEB)
ls -l "$build"/packages/*.deb
if command -v lintian >/dev/null 2>&1; then
  lintian --allow-root --tag-display-limit 0 "$build"/packages/*.deb || {
    rc=$?; [ "$rc" -eq 1 ] && echo "lintian: errors above" >&2; exit "$rc"; }
else
  echo "lintian not installed: skipped"
fi
rc=0
"$root/scripts/abi-check.sh" "$build/libkvtier.so" || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || exit "$rc"
