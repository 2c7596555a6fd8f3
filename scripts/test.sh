#!/usr/bin/env bash
# Builds cachalot with its tests, examples and tools, and runs every test with CTest.
# GPU tests skip, with the reason printed, where there is no CUDA device.
# Usage: scripts/test.sh [build-dir]   (default: build-test)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-test}
scripts/setup-deps.sh
JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 600
