#!/usr/bin/env bash
# Installs what a fresh machine lacks to build cachalot: Debian's libfmt-dev (GoogleTest,
# Google Benchmark, CMake, Ninja and the CUDA toolkit are expected to be present; each is
# installed through apt-get if missing and the package exists).
set -euo pipefail
need=()
[ -f /usr/include/fmt/format.h ] || need+=(libfmt-dev)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
[ -d /usr/lib/x86_64-linux-gnu/cmake/GTest ] || [ -d /usr/lib/cmake/GTest ] || need+=(libgtest-dev)
[ -d /usr/lib/x86_64-linux-gnu/cmake/benchmark ] || [ -d /usr/lib/cmake/benchmark ] || need+=(libbenchmark-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null || true
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
