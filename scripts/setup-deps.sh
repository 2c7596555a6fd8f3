#!/usr/bin/env bash
# Installs what a fresh Debian-like machine lacks to build and test cachalot and to run its
# main job: the one setup path of scripts/test.sh and scripts/main-job.sh. Each entry below is
# one package and the check that says it is present; missing ones are installed with apt-get
# (as root, or through sudo). The CUDA toolkit is optional and never installed here. The Python
# package's tests need Debian's python3-pytest and, for the documented pip line in a fresh venv,
# python3-pip and python3-venv, for /usr/bin/python3 (CTest runs pytest with the first
# interpreter that has it). Building the package needs neither setuptools nor wheel.
set -euo pipefail

have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_file() { local f; for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }

# package | check (a shell command that succeeds when the package is present)
packages=(
  "cmake|have_cmd cmake"
  "ninja-build|have_cmd ninja"
  "g++|have_cmd g++"
  "python3|have_cmd python3"
  "pkg-config|have_cmd pkg-config"
  "libfmt-dev|have_file /usr/include/fmt/format.h /usr/local/include/fmt/format.h"
  "libgtest-dev|have_file /usr/lib/x86_64-linux-gnu/cmake/GTest /usr/lib/cmake/GTest /usr/local/lib/cmake/GTest"
  "libbenchmark-dev|have_file /usr/lib/x86_64-linux-gnu/cmake/benchmark /usr/lib/cmake/benchmark /usr/local/lib/cmake/benchmark"
  "python3-pytest|/usr/bin/python3 -c 'import pytest' 2>/dev/null"
  "python3-pip|/usr/bin/python3 -c 'import pip' 2>/dev/null"
  "python3-venv|/usr/bin/python3 -c 'import ensurepip' 2>/dev/null"
)

need=()
for entry in "${packages[@]}"; do
  pkg=${entry%%|*}
  check=${entry#*|}
  eval "$check" || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if have_cmd sudo; then
    SUDO=sudo
  else
    echo "setup: missing ${need[*]}: install them (apt-get install ${need[*]}) and rerun" >&2
    exit 1
  fi
fi
if ! have_cmd apt-get; then
  echo "setup: missing ${need[*]}, and no apt-get to install them with" >&2
  exit 1
fi
echo "setup: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 ||
  { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq "${need[@]}" >/dev/null; }
