#!/usr/bin/env bash
# Packaging checks run by ctest (tests/packaging/CMakeLists.txt). One step per call:
#   exports   LIB                    only kvt_* exported; SONAME; no CUDA in NEEDED; no undefined
#   debs      BUILD WORK             cpack -G DEB into WORK/debs, extract them into WORK/root
#   lintian   WORK                   lintian on WORK/debs/*.deb: no errors
#   model     WORK CLI               kvtier mkmodel (the packaged CLI, else CLI) -> WORK/model
#   example-pkgconfig SRC WORK       build examples/c with make + pkg-config against WORK/root, run
#   example-cmake     SRC WORK       build examples/c with find_package(kvtier) against WORK/root, run
#   java-example      SRC WORK       build examples/java against the packaged jar, run it; the
#                                    packaged maven-install.sh fills a scratch Maven repository
#   csharp-example    SRC WORK       build examples/csharp against the packaged assembly, run it
#   go-build          SRC WORK       build (go vet) the packaged Go source package in GOPATH
#                                    mode, and a module outside the tree that replaces the
#                                    module path with it (built and run)
#   manpage           CLI MANPAGE    kvtier(1) describes every command and flag CLI prints
# KVT_PKG_BINDINGS (env, "java csharp go" or a part): the bindings built in the tree, whose
# packages `debs` then requires and checks. KVT_PKG_DOCS=1 (env): the C API reference was
# built, so libkvtier-doc must exist.
# Exit 77 (ctest SKIP_RETURN_CODE) when a needed tool is missing, saying which.
set -euo pipefail
step=${1:?step}
shift

need() {
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "SKIPPED: '$tool' not found (scripts/install-deps.sh installs it)"
      exit 77
    fi
  done
}
fail() { echo "FAIL: $*" >&2; exit 1; }
libdir_of() {  # the directory holding libkvtier.so.N inside an extracted root
  local lib
  lib=$(find "$1/usr" -name 'libkvtier.so.[0-9]' | head -1)
  [ -n "$lib" ] || fail "no libkvtier.so.N under $1/usr"
  dirname "$lib"
}

# Checks the dynamic-symbol hygiene of one libkvtier.so (build tree or packaged).
check_exports() {
  local lib=$1
  echo "== $lib"
  local extra
  # Defined dynamic symbols: only kvt_* plus the version node KVTIER_0 itself.
  extra=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' \
          | grep -v -e '^kvt_' -e '^KVTIER_[0-9]*$' || true)
  [ -z "$extra" ] || fail "symbols other than kvt_* exported by $lib:"$'\n'"$extra"
  local n
  n=$(nm -D --defined-only "$lib" | grep -c ' kvt_' || true)
  [ "$n" -gt 0 ] || fail "no kvt_* symbols exported by $lib"
  echo "exports: $n kvt_* symbols, nothing else"
  # Every kvt_ symbol carries the KVTIER_0 version from the version script.
  if nm -D --defined-only --with-symbol-versions "$lib" 2>/dev/null | grep ' kvt_' | grep -qv '@@KVTIER_'; then
    fail "kvt_* symbols without the KVTIER_ version node (version script not applied?)"
  fi
  local dyn
  dyn=$(readelf -d "$lib")
  echo "$dyn" | grep -E 'NEEDED|SONAME|RPATH|RUNPATH' || true
  echo "$dyn" | grep -q 'Library soname: \[libkvtier\.so\.[0-9]*\]' || fail "SONAME is not libkvtier.so.N"
  if echo "$dyn" | grep NEEDED | grep -Eiq 'libcuda|libcudart|libcublas|libnvidia|libnvrtc'; then
    fail "$lib has a hard dependency on CUDA libraries (must only dlopen the CUDA module)"
  fi
  # -Wl,--no-undefined: every undefined symbol must be provided by a NEEDED library.
  local undef
  undef=$(ldd -r "$lib" 2>&1 | grep -i 'undefined symbol' || true)
  [ -z "$undef" ] || fail "unresolved symbols in $lib:"$'\n'"$undef"
  echo "no CUDA in NEEDED, no unresolved symbols"
}

case "$step" in
exports)
  need nm readelf ldd
  check_exports "$1"
  ;;

debs)
  need cpack dpkg-deb dpkg-shlibdeps fakeroot file
  build=$1 work=$2
  rm -rf "$work/debs" "$work/root"
  mkdir -p "$work/debs" "$work/root"
  cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/debs" >"$work/cpack.log" 2>&1 \
    || { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
  mapfile -t debs < <(ls "$work"/debs/*.deb)
  [ "${#debs[@]}" -gt 0 ] || fail "cpack made no .deb"
  for deb in "${debs[@]}"; do
    echo "== $(basename "$deb")"
    dpkg-deb -f "$deb" Package Version Architecture Section Depends Suggests
    dpkg-deb -c "$deb" | awk '{print "   ", $1, $6, $7, $8}'
    dpkg-deb -x "$deb" "$work/root"
  done
  names=$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Package; done)
  for want in libkvtier0 libkvtier-dev; do
    grep -qx "$want" <<<"$names" || fail "package $want was not made"
  done
  if [ -n "$(find "$build" -name libkvtier_cuda.so -print -quit)" ]; then
    grep -qx libkvtier-cuda0 <<<"$names" || fail "the CUDA module was built but libkvtier-cuda0 was not made"
  fi
  # Dependencies: shlibs generated for the runtime, the -dev pinned to the same version.
  rt=$(ls "$work"/debs/libkvtier0_*.deb)
  dev=$(ls "$work"/debs/libkvtier-dev_*.deb)
  version=$(dpkg-deb -f "$rt" Version)
  version_up=${version%-*}  # upstream version (file names)
  dpkg-deb -f "$rt" Depends | grep -q 'libc6' || fail "libkvtier0 Depends lacks libc6 (dpkg-shlibdeps did not run?)"
  dpkg-deb -f "$rt" Depends | grep -q 'libssl3' || fail "libkvtier0 Depends lacks libssl3 (libcrypto: SHA-256 block keys)"
  # A build with oneDNN (KVTIER_ONEDNN, the CPU backend's BF16 prefill) links it: the package needs it.
  mkdir -p "$work/rt" && dpkg-deb -x "$rt" "$work/rt"
  rt_lib=$(find "$work/rt" -name 'libkvtier.so.*' -type f)
  [ -n "$rt_lib" ] || fail "libkvtier0 holds no libkvtier.so.*"
  rt_dynamic=$(readelf -d $rt_lib)
  if grep -q 'NEEDED.*libdnnl' <<<"$rt_dynamic"; then
    dpkg-deb -f "$rt" Depends | grep -q 'libdnnl2' || fail "libkvtier0 links oneDNN but its Depends lacks libdnnl2"
  fi
  dpkg-deb -f "$dev" Depends | grep -qF "libkvtier0 (= $version)" || fail "libkvtier-dev does not depend on libkvtier0 (= $version)"
  mkdir -p "$work/ctl" && dpkg-deb -e "$rt" "$work/ctl"
  grep -q '^libkvtier [0-9]* libkvtier0' "$work/ctl/shlibs" || fail "libkvtier0 has no shlibs file"
  echo "libkvtier0 shlibs: $(cat "$work/ctl/shlibs")"
  # Installed layout.
  root=$work/root
  libdir=$(libdir_of "$root")
  for f in usr/include/kvtier/kvtier.h; do [ -f "$root/$f" ] || fail "missing $f"; done
  [ -L "$libdir/libkvtier.so" ] || fail "no libkvtier.so link in $libdir"
  [ -f "$libdir/pkgconfig/kvtier.pc" ] || fail "no kvtier.pc in $libdir/pkgconfig"
  grep -qx 'prefix=/usr' "$libdir/pkgconfig/kvtier.pc" || fail "kvtier.pc prefix is not /usr"
  for f in kvtierConfig.cmake kvtierConfigVersion.cmake kvtierTargets.cmake; do
    [ -f "$libdir/cmake/kvtier/$f" ] || fail "missing $libdir/cmake/kvtier/$f"
  done
  for d in "$root"/usr/share/doc/*/; do
    [ -f "$d/copyright" ] && [ -f "$d/changelog.Debian.gz" ] || fail "$d lacks copyright/changelog.Debian.gz"
  done
  if grep -qx kvtier-tools <<<"$names"; then
    [ -f "$root/usr/share/man/man1/kvtier.1.gz" ] || fail "kvtier-tools lacks /usr/share/man/man1/kvtier.1.gz"
    gzip -t "$root/usr/share/man/man1/kvtier.1.gz" || fail "kvtier.1.gz is not a gzip file"
  fi
  grep -qx kvtier-demo-model <<<"$names" || fail "kvtier-demo-model was not made"
  deb=$(ls "$work"/debs/kvtier-demo-model_*.deb)
  [ "$(dpkg-deb -f "$deb" Architecture)" = all ] || fail "kvtier-demo-model is not Architecture: all"
  for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json heldout.txt demo.gguf; do
    [ -f "$root/usr/share/kvtier/models/demo/$f" ] || fail "kvtier-demo-model lacks /usr/share/kvtier/models/demo/$f"
  done
  tree=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  cmp -s "$root/usr/share/kvtier/models/demo/model.safetensors" "$tree/models/demo/model.safetensors" \
    || fail "kvtier-demo-model's model.safetensors differs from models/demo's"
  if [ "${KVT_PKG_DOCS:-0}" = 1 ]; then
    grep -qx libkvtier-doc <<<"$names" || fail "the C API reference was built but libkvtier-doc was not made"
    deb=$(ls "$work"/debs/libkvtier-doc_*.deb)
    [ "$(dpkg-deb -f "$deb" Architecture)" = all ] || fail "libkvtier-doc is not Architecture: all"
    dpkg-deb -f "$deb" Depends | grep -q libjs-jquery || fail "libkvtier-doc does not depend on libjs-jquery"
    html=$root/usr/share/doc/libkvtier-doc/html
    [ -f "$html/index.html" ] || fail "libkvtier-doc lacks html/index.html"
    grep -q 'kvt_step' "$html/kvtier_8h.html" || fail "libkvtier-doc's kvtier_8h.html does not document kvt_step"
    [ "$(readlink "$html/jquery.js")" = ../../../javascript/jquery/jquery.js ] \
      || fail "libkvtier-doc's jquery.js is not a link to libjs-jquery's"
    echo "libkvtier-doc: $(find "$html" -name '*.html' | wc -l) pages"
  fi
  check_exports "$libdir/libkvtier.so.0"
  # Bindings built in this tree (KVT_PKG_BINDINGS="java csharp go", set by CMake): their
  # packages, contents and dependencies.
  for b in ${KVT_PKG_BINDINGS:-}; do
    case "$b" in
    java)   pkg=libkvtier-java;    arch=any
            grep -qx libkvtier-java-doc <<<"$names" || fail "the java binding was built but libkvtier-java-doc was not made" ;;
    csharp) pkg=libkvtier-cil;     arch=any ;;
    go)     pkg=golang-kvtier-dev; arch=all ;;
    *) fail "unknown binding $b" ;;
    esac
    grep -qx "$pkg" <<<"$names" || fail "the $b binding was built but $pkg was not made"
    deb=$(ls "$work"/debs/${pkg}_*.deb)
    deps=$(dpkg-deb -f "$deb" Depends)
    if [ "$arch" = all ]; then
      [ "$(dpkg-deb -f "$deb" Architecture)" = all ] || fail "$pkg is not Architecture: all"
    fi
    case "$b" in
    java)
      grep -qF "libkvtier0 (= $version)" <<<"$deps" || fail "$pkg does not depend on libkvtier0 (= $version)"
      grep -q 'libc6' <<<"$deps" || fail "$pkg Depends lacks libc6 (dpkg-shlibdeps did not run on the JNI library?)"
      [ -f "$root/usr/share/java/kvtier-$version_up.jar" ] || fail "missing /usr/share/java/kvtier-$version_up.jar"
      [ "$(readlink "$root/usr/share/java/kvtier.jar")" = "kvtier-$version_up.jar" ] \
        || fail "/usr/share/java/kvtier.jar is not a link to kvtier-$version_up.jar"
      [ -f "$libdir/jni/libkvtier_jni.so" ] || fail "missing $libdir/jni/libkvtier_jni.so"
      readelf -d "$libdir/jni/libkvtier_jni.so" | grep -q 'NEEDED.*libkvtier\.so\.0' \
        || fail "libkvtier_jni.so does not link libkvtier.so.0"
      # Maven coordinates: the pom in Debian's repository layout, the jar linked beside it,
      # the pom inside the jar too.
      mrepo=$root/usr/share/maven-repo/dev/kvtier/kvtier/$version_up
      grep -q '<groupId>dev.kvtier</groupId>' "$mrepo/kvtier-$version_up.pom" \
        && grep -q "<version>$version_up</version>" "$mrepo/kvtier-$version_up.pom" \
        || fail "missing or wrong $mrepo/kvtier-$version_up.pom"
      [ "$(readlink "$mrepo/kvtier-$version_up.jar")" = "../../../../../java/kvtier-$version_up.jar" ] \
        || fail "$mrepo/kvtier-$version_up.jar is not a link to /usr/share/java/kvtier-$version_up.jar"
      jar tf "$root/usr/share/java/kvtier-$version_up.jar" | grep -q 'META-INF/maven/dev.kvtier/kvtier/pom.xml' \
        || fail "the jar does not carry its pom"
      [ -x "$root/usr/share/libkvtier-java/maven-install.sh" ] || fail "missing /usr/share/libkvtier-java/maven-install.sh"
      [ -f "$root/usr/share/doc/libkvtier-java/api/dev/kvtier/Context.html" ] \
        || fail "libkvtier-java-doc lacks the javadoc of dev.kvtier.Context"
      ;;
    csharp)
      grep -qF "libkvtier0 (= $version)" <<<"$deps" || fail "$pkg does not depend on libkvtier0 (= $version)"
      grep -q 'libc6' <<<"$deps" || fail "$pkg Depends lacks libc6 (dpkg-shlibdeps did not run on the glue library?)"
      grep -q 'mono-runtime' <<<"$deps" || fail "$pkg does not depend on mono-runtime"
      cli=$root/usr/lib/cli/kvtier
      for f in Kvtier.dll Kvtier.xml libkvtier_csharp.so; do
        [ -f "$cli/$f" ] || fail "missing /usr/lib/cli/kvtier/$f"
      done
      # The glue is found by name beside the assembly (Mono and .NET alike), not by a dllmap.
      [ ! -e "$cli/Kvtier.dll.config" ] || fail "Kvtier.dll.config (a Mono dllmap) is packaged"
      grep -q '<member name="M:Kvtier.Context.Step"' "$cli/Kvtier.xml" || fail "Kvtier.xml does not document Context.Step"
      ;;
    go)
      grep -qF "libkvtier-dev (= $version)" <<<"$deps" || fail "$pkg does not depend on libkvtier-dev (= $version)"
      grep -q 'golang-go' <<<"$deps" || fail "$pkg does not depend on golang-go"
      gpath=github.com/kvtier/kvtier/bindings/go
      gsrc=$root/usr/share/gocode/src/$gpath
      for f in go.mod doc.go kvtier.go example_test.go internal/capi/kvtier.go internal/capi/kvtier_wrap.c swig/kvtier.i; do
        [ -f "$gsrc/$f" ] || fail "missing /usr/share/gocode/src/$gpath/$f"
      done
      grep -qx "module $gpath" "$gsrc/go.mod" || fail "the packaged go.mod does not declare module $gpath"
      grep -q "^func Example" "$gsrc/example_test.go" || fail "the packaged example_test.go has no Example functions"
      grep -q "^package kvtier // import \"$gpath\"" "$root/usr/share/doc/golang-kvtier-dev/reference.txt" \
        || fail "golang-kvtier-dev lacks its reference.txt (go doc -all)"
      ;;
    esac
    echo "$pkg: Depends: $deps"
  done
  echo "packages: $(echo $names)"
  ;;

lintian)
  need lintian
  work=$1
  out=$work/lintian.txt
  rc=0
  lintian --allow-root --tag-display-limit 0 --display-info "$work"/debs/*.deb >"$out" 2>&1 || rc=$?
  cat "$out"
  echo "lintian: exit $rc; $(grep -c '^E:' "$out" || true) errors, $(grep -c '^W:' "$out" || true) warnings, $(grep -c '^I:' "$out" || true) info"
  if grep -q '^E:' "$out"; then fail "lintian reports errors"; fi
  # The CLI has its manual page, and the page itself is clean.
  if grep -E '^[EWI]: [^ ]+: (no-manual-page|manpage-|groff-message)' "$out"; then
    fail "lintian reports problems with the manual page (above)"
  fi
  if grep -E '^[EWI]: [^ ]+: embedded-javascript-library' "$out"; then
    fail "a documentation package embeds a JavaScript library Debian packages (above)"
  fi
  # lintian exits 1 for errors (checked above) and 2 when it could not run.
  [ "$rc" -le 1 ] || fail "lintian failed to run (exit $rc)"
  ;;

model)
  work=$1 cli=$2
  root=$work/root
  if [ -x "$root/usr/bin/kvtier" ]; then
    cli=$root/usr/bin/kvtier  # the packaged CLI (links only system libraries)
  fi
  rm -rf "$work/model"
  "$cli" mkmodel --preset tiny-llama --seed 7 --out "$work/model"
  [ -f "$work/model/config.json" ] || fail "mkmodel made no config.json"
  echo "model made with $cli"
  ;;

example-pkgconfig|example-cmake)
  src=$1 work=$2
  root=$work/root
  libdir=$(libdir_of "$root")
  [ ! -e /usr/include/kvtier/kvtier.h ] || echo "note: a system-wide kvtier.h exists; checking paths explicitly"
  dir=$work/${step#example-}
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$src"/examples/c/* "$dir/"   # a copy: nothing of the source tree is on any path
  if [ "$step" = example-pkgconfig ]; then
    need make cc pkg-config
    # Only the root's kvtier.pc is visible; its /usr paths are mapped into the root.
    export PKG_CONFIG_LIBDIR=$libdir/pkgconfig PKG_CONFIG_PATH="" PKG_CONFIG_SYSROOT_DIR=$root
    echo "pkg-config --cflags --libs kvtier: $(pkg-config --cflags --libs kvtier)"
    make -C "$dir" 2>&1 | tee "$dir/build.log"
    exe=$dir/kvtier_example
  else
    need cmake cc
    gen=()
    command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    cmake -S "$dir" -B "$dir/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$root/usr" \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
      -DCMAKE_BUILD_TYPE=Release 2>&1 | tee "$dir/build.log"
    found=$(grep '^kvtier_DIR' "$dir/build/CMakeCache.txt" | cut -d= -f2)
    echo "kvtier_DIR=$found"
    case "$found" in "$root"/*) ;; *) fail "find_package(kvtier) found $found, not the package root";; esac
    cmake --build "$dir/build" --verbose 2>&1 | tee -a "$dir/build.log"
    exe=$dir/build/kvtier_example
  fi
  # The work dir may itself lie in a build dir inside the source tree: mask it, then no
  # other path into the source tree may appear on any compile/link line.
  if sed "s#$work#WORK#g" "$dir/build.log" | grep -F -- "$src" >&2; then
    fail "the source tree ($src) appears on a compile/link line (above)"
  fi
  grep -F -- "-I$root/usr/include" "$dir/build.log" >/dev/null || grep -F -- "$root/usr/include" "$dir/build.log" >/dev/null \
    || fail "the build did not use the packaged header"
  export LD_LIBRARY_PATH=$libdir
  resolved=$(ldd "$exe" | awk '/libkvtier\.so/ {print $3}')
  echo "libkvtier resolved to: $resolved"
  case "$resolved" in "$root"/*) ;; *) fail "the example does not use the packaged libkvtier ($resolved)";; esac
  "$exe" "$work/model" 8
  # With the packaged demo model it writes text.
  "$exe" "$root/usr/share/kvtier/models/demo" 16 | tee "$dir/demo.out"
  grep -q '^sequence [0-9]*: The meaning of life is' "$dir/demo.out" || fail "the example printed no text with the demo model"
  ;;

java-example)
  # examples/java compiled against the packaged jar and run with the packaged JNI library.
  need javac java
  src=$1 work=$2
  root=$work/root
  libdir=$(libdir_of "$root")
  jar=$root/usr/share/java/kvtier.jar
  [ -e "$jar" ] || fail "no packaged $jar"
  dir=$work/java
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$src"/examples/java/*.java "$dir/"
  javac -encoding UTF-8 -cp "$jar" -d "$dir/classes" "$dir"/*.java
  LD_LIBRARY_PATH=$libdir java -Djava.library.path="$libdir/jni" -cp "$jar:$dir/classes" \
    ServiceExample "$work/model"
  # With the packaged demo model it prints text.
  LD_LIBRARY_PATH=$libdir KVTIER_DEMO_MODEL=$root/usr/share/kvtier/models/demo java -Djava.library.path="$libdir/jni" \
    -cp "$jar:$dir/classes" ServiceExample | tee "$dir/demo.out"
  grep -q '^request 0 done ([A-Z_]*): The meaning of life is' "$dir/demo.out" || fail "the Java example printed no text with the demo model"
  # The packaged script installs the packaged pom and jar into a Maven repository.
  if command -v mvn >/dev/null 2>&1; then
    mrepo=$(ls -d "$root"/usr/share/maven-repo/dev/kvtier/kvtier/[0-9]*)
    version=$(basename "$mrepo")
    bash "$root/usr/share/libkvtier-java/maven-install.sh" --repo "$dir/m2" "$mrepo"
    for f in kvtier-$version.pom kvtier-$version.jar; do
      [ -f "$dir/m2/dev/kvtier/kvtier/$version/$f" ] || fail "maven-install.sh did not install $f"
    done
    cmp "$dir/m2/dev/kvtier/kvtier/$version/kvtier-$version.jar" "$root/usr/share/java/kvtier-$version.jar" \
      || fail "the jar in the Maven repository is not the packaged one"
  else
    echo "note: mvn not found; the packaged maven-install.sh was not run"
  fi
  ;;

csharp-example)
  # examples/csharp compiled against the packaged assembly and run: Mono loads the glue
  # library through the packaged dllmap from the assembly's directory.
  need mcs mono
  src=$1 work=$2
  root=$work/root
  libdir=$(libdir_of "$root")
  cli=$root/usr/lib/cli/kvtier
  [ -f "$cli/Kvtier.dll" ] || fail "no packaged $cli/Kvtier.dll"
  dir=$work/csharp
  rm -rf "$dir" && mkdir -p "$dir"
  mcs -nologo -r:"$cli/Kvtier.dll" -out:"$dir/ServiceExample.exe" "$src"/examples/csharp/*.cs
  # LD_LIBRARY_PATH holds only the packaged libkvtier.so.0 (not installed system-wide here);
  # Mono finds libkvtier_csharp.so by name beside Kvtier.dll, with no dllmap.
  MONO_PATH=$cli LD_LIBRARY_PATH=$libdir mono "$dir/ServiceExample.exe" "$work/model"
  # With the packaged demo model it prints text.
  MONO_PATH=$cli LD_LIBRARY_PATH=$libdir KVTIER_DEMO_MODEL=$root/usr/share/kvtier/models/demo \
    mono "$dir/ServiceExample.exe" | tee "$dir/demo.out"
  grep -q '^request 0 done ([A-Za-z]*): The meaning of life is' "$dir/demo.out" || fail "the C# example printed no text with the demo model"
  ;;

go-build)
  # The packaged Go source package builds against the packaged header and library, with no
  # network and nothing of the source tree: in GOPATH mode (Debian's gocode layout), and as
  # the module a program outside the tree uses through `replace` (built and run).
  need go
  src=$1 work=$2
  root=$work/root
  libdir=$(libdir_of "$root")
  gpath=github.com/kvtier/kvtier/bindings/go
  dir=$work/go
  rm -rf "$dir" && mkdir -p "$dir"
  cd "$dir"
  export GOCACHE="$dir/cache" GOPROXY=off GOFLAGS= CGO_ENABLED=1 \
    CGO_CFLAGS="-I$root/usr/include" CGO_LDFLAGS="-L$libdir -Wl,-rpath,$libdir"
  env GOPATH="$root/usr/share/gocode" GO111MODULE=off go vet "$gpath"
  echo "go vet $gpath: OK (GOPATH mode, built against $root)"
  bash "$src/bindings/go/testdata/consumer/consumer.sh" "$root/usr/share/gocode/src/$gpath" "$work/model"
  ;;

manpage)
  # Every command `kvtier --help` lists is a section of kvtier(1), every flag a command's
  # --help prints appears in it, and groff formats it without a warning.
  need groff
  cli=$1 page=$2
  text=$(sed 's/\\-/-/g' "$page")
  commands=$("$cli" --help | awk '/^commands:/{c=1; next} c&&/^  [a-z]/{print $1} /^$/{if(c) c=0}')
  [ -n "$commands" ] || fail "no commands in '$cli --help'"
  missing=()
  for c in $commands; do
    grep -q "^\.SS \"$c" <<<"$text" || missing+=("command $c")
    for flag in $("$cli" "$c" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
      grep -qE -- "$flag([^a-z0-9-]|\$)" <<<"$text" || missing+=("$c $flag")
    done
  done
  [ "${#missing[@]}" -eq 0 ] || fail "kvtier.1 does not describe: ${missing[*]}"
  warnings=$(groff -man -ww -z "$page" 2>&1)
  [ -z "$warnings" ] || fail "groff warns about kvtier.1:"$'\n'"$warnings"
  echo "kvtier.1 describes the commands $(echo $commands) and all their flags"
  ;;

*)
  echo "unknown step $step" >&2
  exit 2
  ;;
esac
