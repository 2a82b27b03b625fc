#!/usr/bin/env bash
# Every kvt_* function libkvtier.so exports is in the Doxygen reference (its index of
# functions, globals_func.html), so no exported function is undocumented or missing from
# the header. usage: reference_complete.sh LIBKVTIER HTML_DIR
set -euo pipefail
lib=${1:?LIBKVTIER} html=${2:?HTML_DIR}
index=$html/globals_func.html
[ -f "$index" ] || { echo "FAIL: no $index (was the reference built?)" >&2; exit 1; }
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | grep '^kvt_' | sort -u)
missing=()
for f in $exported; do
  grep -q "<li>$f()&#160;" "$index" || missing+=("$f")
done
echo "$(wc -w <<<"$exported") exported kvt_* functions; $(( $(wc -w <<<"$exported") - ${#missing[@]} )) in the reference"
if [ "${#missing[@]}" -gt 0 ]; then
  echo "FAIL: exported but not in the reference: ${missing[*]}" >&2
  exit 1
fi
