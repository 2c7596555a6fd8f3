#!/usr/bin/env bash
# The reliability stage of CI (called by .ci/run): the whole test suite under ASan+UBSan and
# under TSan (which includes the stress program's short mode and the fault sweep), then each
# libFuzzer target for FUZZ_SECONDS (default 60). Prints the time of each phase; fails on the
# first failure. Measured on a 2-core machine: see docs/reliability.md.
# Environment: BUILD_PREFIX (default <repo>/build), JOBS (default 2), FUZZ_SECONDS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export BUILD_PREFIX=${BUILD_PREFIX:-$root/build}
export JOBS=${JOBS:-2}
start=$SECONDS
phase() {  # phase <name> <command...>
  local t0=$SECONDS
  echo "##### $1"
  "${@:2}"
  echo "##### $1: $((SECONDS - t0)) s"
}
phase "ASan+UBSan ctest" "$root/scripts/sanitizers.sh" asan
phase "TSan ctest" "$root/scripts/sanitizers.sh" tsan
phase "fuzzing" "$root/scripts/fuzz.sh" all
echo "##### reliability stage: $((SECONDS - start)) s"
