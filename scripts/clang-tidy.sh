#!/usr/bin/env bash
# Runs clang-tidy (the repository's .clang-tidy) on every source file of src/, using the
# compile_commands.json of a configured build. Fails on any finding.
#   scripts/clang-tidy.sh [build-dir]        (default: <repo>/build)
# Environment: CLANG_TIDY (default clang-tidy-14, else clang-tidy), JOBS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
tidy=${CLANG_TIDY:-$(command -v clang-tidy-14 || command -v clang-tidy)}
jobs=${JOBS:-2}
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "no $build/compile_commands.json: configure a build first (cmake -S . -B $build)" >&2
  exit 2
fi
# GCC-only flags in the database mean nothing to clang; drop them instead of failing on them.
extra=(--extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-unused-command-line-argument)
cd "$root"
find src -name '*.cpp' -print0 | sort -z |
  xargs -0 -n 1 -P "$jobs" "$tidy" -p "$build" --quiet "${extra[@]}" 2>&1 |
  grep -v -E '^[0-9]+ warnings? generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter' |
  tee /tmp/cachalot-clang-tidy.$$ || true
if grep -q -E 'warning:|error:' /tmp/cachalot-clang-tidy.$$; then
  rm -f /tmp/cachalot-clang-tidy.$$
  echo "clang-tidy: findings above" >&2
  exit 1
fi
rm -f /tmp/cachalot-clang-tidy.$$
echo "clang-tidy: clean"
