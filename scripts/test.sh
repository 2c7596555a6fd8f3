#!/usr/bin/env bash
# Builds cachalot with its tests, examples and tools, and runs every test with CTest. Tests that
# need what this machine lacks (a CUDA device, PyTorch, TensorRT) skip; the summary at the end
# lists every skipped test with the reason it printed.
# Usage: scripts/test.sh [build-dir]   (default: build-test)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-test}
scripts/setup-deps.sh
JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$JOBS"
rc=0
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 600 2>&1 |
  tee "$BUILD/ctest-output.txt" || rc=$?
echo
echo "== skipped tests and why"
python3 scripts/skip_reasons.py "$BUILD/ctest-output.txt" "$BUILD/Testing/Temporary/LastTest.log" ||
  true
exit "$rc"
