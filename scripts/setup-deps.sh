#!/usr/bin/env bash
# Installs what a fresh machine lacks to build cachalot: Debian's libfmt-dev (GoogleTest,
# Google Benchmark, CMake, Ninja and the CUDA toolkit are expected to be present; each is
# installed through apt-get if missing and the package exists), and for the Python package's
# tests Debian's python3-pytest, python3-pip, python3-setuptools and python3-wheel (for
# /usr/bin/python3; CTest runs pytest with the first interpreter that has it).
set -euo pipefail
need=()
[ -f /usr/include/fmt/format.h ] || need+=(libfmt-dev)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
[ -d /usr/lib/x86_64-linux-gnu/cmake/GTest ] || [ -d /usr/lib/cmake/GTest ] || need+=(libgtest-dev)
[ -d /usr/lib/x86_64-linux-gnu/cmake/benchmark ] || [ -d /usr/lib/cmake/benchmark ] || need+=(libbenchmark-dev)
py=/usr/bin/python3
[ -x $py ] || need+=(python3)
for module in pytest pip setuptools wheel; do
  [ -x $py ] && $py -c "import $module" 2>/dev/null || need+=("python3-$module")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null || true
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
