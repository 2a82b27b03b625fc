#!/usr/bin/env bash
# Maintainer step (not part of the build): fetches the Debian packages whose English text the
# demo model is trained on and writes the corpus that scripts/demo_model/train.py reads.
#   scripts/demo_model/build_corpus.sh OUT_DIR
# OUT_DIR gets train.jsonl and valid.jsonl (one document per line) and SOURCES.tsv (package,
# version, licence). Needs apt-get (packages are downloaded and unpacked, not installed).
# The committed model/demo/SOURCES.tsv and heldout.txt come from this script.
set -euo pipefail
out=${1:?usage: build_corpus.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each package: English prose whose licence allows redistribution (see SOURCES.tsv).
packages=(fortunes fortunes-min fortune-anarchism fortunes-bofh-excuses dict-devil dict-jargon)
chmod 777 "$work"  # apt-get download runs as _apt where it can
(cd "$work" && apt-get download "${packages[@]}" >/dev/null)
for deb in "$work"/*.deb; do
  name=$(dpkg-deb -f "$deb" Package)
  mkdir -p "$work/root/$name"
  dpkg -x "$deb" "$work/root/$name"
  dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >>"$work/versions"
done
python3 "$here/build_corpus.py" --root "$work/root" --versions "$work/versions" --out "$out"
