#!/usr/bin/env bash
# Installs everything kvtier needs to build, document and test on Debian 12, from Debian's
# packages.
# Idempotent: re-running it only installs what is missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  clang-14 libclang-rt-14-dev llvm-14 lld  # lld: the sanitizer builds link with it
  libabsl-dev libgtest-dev libgmock-dev nlohmann-json3-dev libssl-dev
  libcli11-dev  # the kvtier CLI's argument parser (header-only: a build dependency only)
  # The remote KV tier's Redis client (libhiredis0.14 at run time); the tests start their own
  # redis-server (and a three-node cluster with redis-cli) on loopback ports.
  libhiredis-dev redis-server redis-tools
  libicu-dev
  # oneDNN: the CPU backend's BF16 prefill matmul (libdnnl2 at run time; KVTIER_ONEDNN=OFF
  # builds without it). oneDNN's CMake package looks for OpenCL's headers and loader, which
  # Debian only recommends, so they are named here.
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
  dpkg-dev fakeroot file lintian abigail-tools
  swig golang-go openjdk-17-jdk-headless junit5 mono-mcs nunit-console libnunit-cil-dev
  doxygen
  # The structured-output corpus test validates outputs with jsonschema.
  python3 python3-jsonschema
  # Tests: the Prometheus text of `kvtier run --metrics` read back by a real parser.
  python3-prometheus-client
  # Maven, with the plugins its tests use resolved offline from /usr/share/maven-repo:
  # scripts/maven-install.sh (install plugin) and a consumer project (compiler, resources).
  maven libmaven-install-plugin-java libmaven-compiler-plugin-java libmaven-resources-plugin-java
)
# Node.js + npm are only needed for the tokenizer test oracles; a machine that already has
# node (e.g. from NodeSource, whose nodejs bundles npm) keeps it.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
