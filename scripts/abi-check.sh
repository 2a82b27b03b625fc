#!/usr/bin/env bash
# Checks a built libkvtier.so against the committed ABI baseline (packaging/abi/libkvtier.abi)
# with libabigail, considering only the public header's types (include/kvtier).
#
#   scripts/abi-check.sh LIBRARY                 compare LIBRARY with the baseline
#   scripts/abi-check.sh --update LIBRARY        rewrite the baseline from LIBRARY
#   options: --baseline FILE  --headers DIR       (defaults: the committed ones)
#
# LIBRARY must carry debug info (RelWithDebInfo/Debug build, not the stripped packaged one).
# abidiff's exit status is a bitmask (libabigail's abidiff_status), tested bit by bit:
#   bit 0 (1) ERROR, bit 1 (2) USAGE_ERROR          -> the check itself failed   (exit 2)
#   bit 3 (8) ABI_INCOMPATIBLE_CHANGE               -> incompatible               (exit 1)
#   bit 2 (4) ABI_CHANGE: libabigail sets only this bit for changes it cannot prove
#             incompatible (e.g. a parameter's type changed). For a C ABI those break
#             callers too, so a change is accepted only when it is nothing but added
#             symbols: abidiff is re-run with --no-added-syms and must then report no
#             change (bit 2 clear). Additions pass with a note to refresh the baseline
#             when the release is made.
# Exit: 0 compatible, 1 ABI break, 2 error, 77 skipped (libabigail not installed, or the
# library has no debug info).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
baseline=$root/packaging/abi/libkvtier.abi
headers=$root/include/kvtier
update=0
lib=""
while [ $# -gt 0 ]; do
  case "$1" in
    --update) update=1 ;;
    --baseline) baseline=$2; shift ;;
    --headers) headers=$2; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) lib=$1 ;;
  esac
  shift
done
[ -n "$lib" ] || { echo "usage: $0 [--update] [--baseline FILE] [--headers DIR] LIBRARY" >&2; exit 2; }
[ -f "$lib" ] || { echo "abi-check: no such library: $lib" >&2; exit 2; }

for tool in abidw abidiff readelf; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "abi-check: SKIPPED: $tool not found (install abigail-tools / binutils)"
    exit 77
  fi
done
if ! readelf -S --wide "$lib" | grep -q '\.debug_info'; then
  echo "abi-check: SKIPPED: $lib has no debug info (build RelWithDebInfo or Debug)"
  exit 77
fi

# Same options for the baseline and the candidate: only what the exported kvt_* functions
# reach, types defined outside the public header dropped (opaque handles stay opaque), no
# build paths.
abidw_opts=(--headers-dir "$headers" --drop-private-types --exported-interfaces-only --no-show-locs --no-elf-needed
            --no-comp-dir-path --no-corpus-path)
if [ "$update" = 1 ]; then
  mkdir -p "$(dirname "$baseline")"
  abidw "${abidw_opts[@]}" --out-file "$baseline" "$lib"
  # Translation-unit paths relative to the source tree (abidiff matches by names, not paths).
  sed -i "s#path='$root/#path='#g" "$baseline"
  echo "abi-check: baseline written to $baseline"
  exit 0
fi
[ -f "$baseline" ] || { echo "abi-check: no baseline at $baseline (run with --update)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
abidw "${abidw_opts[@]}" --out-file "$tmp/current.abi" "$lib"

rc=0
abidiff "$baseline" "$tmp/current.abi" >"$tmp/report" 2>&1 || rc=$?
echo "abi-check: abidiff exit status $rc (baseline $baseline vs $lib)"
if (( rc & 3 )); then
  cat "$tmp/report"
  echo "abi-check: ERROR: abidiff failed (status bits 0/1 set: $rc)" >&2
  exit 2
fi
if (( rc & 8 )); then
  cat "$tmp/report"
  echo "abi-check: FAIL: incompatible ABI change (abidiff bit 3, ABI_INCOMPATIBLE_CHANGE)" >&2
  exit 1
fi
if (( rc & 4 )); then
  rc2=0
  abidiff --no-added-syms "$baseline" "$tmp/current.abi" >"$tmp/report2" 2>&1 || rc2=$?
  if (( rc2 & 3 )); then
    cat "$tmp/report2"
    echo "abi-check: ERROR: abidiff --no-added-syms failed (status $rc2)" >&2
    exit 2
  fi
  if (( rc2 & 12 )); then
    cat "$tmp/report2"
    echo "abi-check: FAIL: the ABI changed beyond added symbols (abidiff bit 2, ABI_CHANGE)" >&2
    exit 1
  fi
  cat "$tmp/report"
  echo "abi-check: OK: only additions (compatible); refresh the baseline at release:"
  echo "  scripts/abi-check.sh --update $lib"
  exit 0
fi
echo "abi-check: OK: no ABI change"
