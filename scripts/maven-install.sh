#!/usr/bin/env bash
# Installs the kvtier Java artifacts (dev.kvtier:kvtier) into a local Maven repository, so
# that Maven and Gradle builds resolve them by their coordinates.
#
# usage: maven-install.sh [--repo DIR] [ARTIFACT_DIR]
#   ARTIFACT_DIR  a directory holding kvtier-<version>.pom and kvtier-<version>.jar, and any of
#                 the classifier jars beside them (kvtier-<version>-<classifier>.jar: the
#                 self-contained linux-<arch> jar, javadoc, sources). Either a build tree's
#                 bindings/java/maven, or the Debian package libkvtier-java's
#                 /usr/share/maven-repo/dev/kvtier/kvtier/<version> (the default).
#   --repo DIR    the repository to install into (default: Maven's, ~/.m2/repository)
#   --print-settings  print the Maven settings this script uses and exit
#
# Runs `mvn install:install-file` for each artifact. Where Debian's Maven repository
# provides the install plugin (package libmaven-install-plugin-java), Maven resolves its
# plugins from /usr/share/maven-repo only, so nothing is downloaded; elsewhere Maven uses its
# usual remote repositories.
set -euo pipefail

debian_repo=/usr/share/maven-repo
install_plugin=org.apache.maven.plugins:maven-install-plugin

# Settings that make /usr/share/maven-repo the only repository (checksums: Debian's repository
# has none) and send everything else to a URL that does not exist.
settings() {
  cat <<EOF
<settings>
  <profiles>
    <profile>
      <id>debian</id>
      <repositories>
        <repository>
          <id>debian</id><url>file://$debian_repo</url>
          <releases><checksumPolicy>ignore</checksumPolicy></releases>
          <snapshots><enabled>false</enabled></snapshots>
        </repository>
      </repositories>
      <pluginRepositories>
        <pluginRepository>
          <id>debian</id><url>file://$debian_repo</url>
          <releases><checksumPolicy>ignore</checksumPolicy></releases>
          <snapshots><enabled>false</enabled></snapshots>
        </pluginRepository>
      </pluginRepositories>
    </profile>
  </profiles>
  <activeProfiles><activeProfile>debian</activeProfile></activeProfiles>
  <mirrors>
    <mirror><id>debian-only</id><mirrorOf>*,!debian</mirrorOf><url>file:///nonexistent</url></mirror>
  </mirrors>
</settings>
EOF
}

repo=""
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
  --repo) repo=${2:?--repo DIR}; shift 2 ;;
  --print-settings) settings; exit 0 ;;
  -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
  *) dir=$1; shift ;;
  esac
done
if [ -z "$dir" ]; then
  dir=$(ls -d "$debian_repo"/dev/kvtier/kvtier/[0-9]* 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$dir" ] || { echo "maven-install.sh: no ARTIFACT_DIR given and none in $debian_repo" >&2; exit 2; }
fi
command -v mvn >/dev/null 2>&1 || { echo "maven-install.sh: mvn not found (Debian: apt-get install maven)" >&2; exit 2; }

pom=$(ls "$dir"/kvtier-*.pom 2>/dev/null | head -1)
[ -n "$pom" ] || { echo "maven-install.sh: no kvtier-<version>.pom in $dir" >&2; exit 2; }
version=$(basename "$pom" .pom)
version=${version#kvtier-}
jar=$dir/kvtier-$version.jar
[ -e "$jar" ] || { echo "maven-install.sh: no $jar" >&2; exit 2; }

# The classifier jars beside the main one.
classified=()
for f in "$dir"/kvtier-"$version"-*.jar; do
  [ -e "$f" ] && classified+=("$f")
done

args=(-B -q -Dstyle.color=never)
[ -n "$repo" ] && args+=("-Dmaven.repo.local=$repo")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
goal=$install_plugin:install-file
plugin_dir=$debian_repo/org/apache/maven/plugins/maven-install-plugin
if [ -d "$plugin_dir" ]; then
  # Pin the version Debian has, and use Debian's repository alone.
  plugin_version=$(ls "$plugin_dir" | grep -E '^[0-9]' | sort -V | tail -1)
  goal=$install_plugin:$plugin_version:install-file
  settings >"$work/settings.xml"
  args+=(-s "$work/settings.xml")
fi
# Run from an empty directory: install-file needs no project, and a pom.xml in the current
# directory must not be read.
mkdir "$work/empty"
# Debian's mvn writes colour resets even in batch mode; they are dropped (pipefail keeps
# mvn's status).
run_mvn() { (cd "$work/empty" && mvn "$@") 2>&1 | sed 's/\x1b\[0m//g'; }
# install-file takes one artifact per run: the jar with its pom, then each classifier jar.
run_mvn "${args[@]}" "$goal" "-Dfile=$(readlink -f "$jar")" "-DpomFile=$(readlink -f "$pom")"
classifiers=()
for f in "${classified[@]}"; do
  c=$(basename "$f" .jar)
  c=${c#kvtier-$version-}
  run_mvn "${args[@]}" "$goal" "-Dfile=$(readlink -f "$f")" -DgroupId=dev.kvtier \
    -DartifactId=kvtier "-Dversion=$version" -Dpackaging=jar "-Dclassifier=$c" -DgeneratePom=false
  classifiers+=("$c")
done
what="dev.kvtier:kvtier:$version"
[ "${#classifiers[@]}" -gt 0 ] && what="$what (and classifiers ${classifiers[*]})"
echo "installed $what into ${repo:-the local repository (~/.m2/repository)}"
