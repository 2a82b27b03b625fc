#!/usr/bin/env bash
# Builds and runs main.go as a program outside the repository would: a new module in a
# temporary directory whose go.mod has no require, only
#   replace github.com/kvtier/kvtier/bindings/go => MODULE_DIR
# and GOFLAGS=-mod=mod lets `go build` add the requirement itself. No network (GOPROXY=off),
# no workspace. cgo finds kvtier.h / libkvtier through CGO_CFLAGS / CGO_LDFLAGS from the
# caller's environment (or the system paths when libkvtier-dev is installed).
# usage: consumer.sh MODULE_DIR MODEL_DIR
set -euo pipefail
module=$(cd "${1:?usage: consumer.sh MODULE_DIR MODEL_DIR}" && pwd)
model=${2:?usage: consumer.sh MODULE_DIR MODEL_DIR}
path=github.com/kvtier/kvtier/bindings/go
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-go-consumer.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
mkdir "$work/src"
cp "$here/main.go" "$work/src/"
printf 'module example.com/kvtier-consumer\n\ngo 1.19\n\nreplace %s => %s\n' "$path" "$module" >"$work/src/go.mod"
cd "$work/src"
export GOFLAGS=-mod=mod GOPROXY=off GOWORK=off GO111MODULE=on GOPATH="$work/gopath" \
  GOCACHE="${GOCACHE:-$work/cache}" CGO_ENABLED=1
go build -o "$work/consumer" .
echo "== go.mod after go build:"
cat go.mod
grep -q "^require $path " go.mod || { echo "FAIL: go build did not add the requirement on $path" >&2; exit 1; }
# The binding was compiled from MODULE_DIR, not from anywhere else.
go list -m -f '{{.Path}} => {{.Replace.Dir}}' "$path" | tee "$work/resolved"
grep -qF " => $module" "$work/resolved" || { echo "FAIL: $path did not resolve to $module" >&2; exit 1; }
"$work/consumer" "$model"
