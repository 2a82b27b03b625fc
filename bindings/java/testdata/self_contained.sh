#!/usr/bin/env bash
# Proof that the self-contained jar needs nothing else: SelfContained.java runs with that jar
# alone on the classpath, with no LD_LIBRARY_PATH and no java.library.path, on a machine
# where the system has no kvtier_jni.
#   jar   JAVA JAR CLASSES MODEL       run the compiled SelfContained from CLASSES with JAR
#   maven SCRIPT ARTIFACTS MODEL       SCRIPT (scripts/maven-install.sh) installs ARTIFACTS into
#                                      a scratch Maven repository; a Maven project depending on
#                                      dev.kvtier:kvtier:<version>:linux-<arch> compiles
#                                      SelfContained.java (mvn, offline), which then runs with
#                                      the jar from that repository
# Exit 77 (skipped) when a kvtier_jni is on the JVM's default java.library.path (the
# self-contained path would not be taken) or, for maven, when mvn is missing.
set -euo pipefail
mode=${1:?mode}
shift
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-java-proof.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH

# The JVM's default java.library.path must not offer a kvtier_jni.
system_jni() {
  local java=$1 dir
  "$java" -XshowSettings:properties -version 2>&1 | awk '/java.library.path = /{p=1; sub(/.*= /,"")} p&&/=/&&!/java.library.path/{p=0} p{print $1}' \
    | while read -r dir; do [ -e "$dir/libkvtier_jni.so" ] && echo "$dir/libkvtier_jni.so"; done || true
}

run() {  # JAVA CLASSPATH MODEL
  local found
  found=$(system_jni "$1")
  if [ -n "$found" ]; then
    echo "SKIPPED: the system has $found, which the jar would load instead of its own copy"
    exit 77
  fi
  (cd "$work" && "$1" -cp "$2" SelfContained "$3")
  if ls "${TMPDIR:-/tmp}"/kvtier-native-* >/dev/null 2>&1; then
    echo "note: kvtier-native-* directories exist in ${TMPDIR:-/tmp} (other processes?)"
  fi
}

case "$mode" in
jar)
  java=$1 jar=$2 classes=$3 model=$4
  cp "$jar" "$work/"
  run "$java" "$work/$(basename "$jar"):$classes" "$model"
  ;;
maven)
  script=$1 artifacts=$2 model=$3
  if ! command -v mvn >/dev/null 2>&1; then
    echo "SKIPPED: 'mvn' not found (scripts/install-deps.sh installs maven)"
    exit 77
  fi
  pom=$(ls "$artifacts"/kvtier-*.pom)
  version=$(basename "$pom" .pom)
  version=${version#kvtier-}
  native=$(ls "$artifacts"/kvtier-"$version"-linux-*.jar)
  classifier=$(basename "$native" .jar)
  classifier=${classifier#kvtier-$version-}
  repo=$work/m2
  bash "$script" --repo "$repo" "$artifacts"
  installed=$repo/dev/kvtier/kvtier/$version
  for f in kvtier-$version.pom kvtier-$version.jar kvtier-$version-$classifier.jar \
           kvtier-$version-javadoc.jar kvtier-$version-sources.jar; do
    [ -f "$installed/$f" ] || { echo "FAIL: $f not in the Maven repository" >&2; exit 1; }
  done
  mkdir -p "$work/project/src/main/java"
  cp "$here/SelfContained.java" "$work/project/src/main/java/"
  sed -e "s/@VERSION@/$version/" -e "s/@CLASSIFIER@/$classifier/" "$here/maven-consumer.pom.xml" \
    >"$work/project/pom.xml"
  settings=$(bash "$script" --print-settings)
  printf '%s\n' "$settings" >"$work/settings.xml"
  (cd "$work/project" && mvn -B -q -s "$work/settings.xml" -Dmaven.repo.local="$repo" compile) 2>&1 \
    | sed "s/\x1b\[0m//g"  # colour resets Debian's mvn writes even in batch mode
  run java "$installed/kvtier-$version-$classifier.jar:$work/project/target/classes" "$model"
  ;;
*)
  echo "unknown mode $mode" >&2
  exit 2
  ;;
esac
