#!/usr/bin/env bash
# Builds the whole test suite under sanitizers and runs it: ASan+UBSan in <prefix>-asan, TSan in
# <prefix>-tsan (RelWithDebInfo, benchmarks and examples off). The CUDA backend (driver API,
# no toolkit needed) is built and tested on the fake driver; the CUDA toolkit is ignored, so
# nothing CUDA-runtime or nvcc-built is sanitized. Any sanitizer report fails the run
# (halt_on_error), as does any failing test.
#   scripts/sanitizers.sh [asan|tsan|all]      (default all)
# Environment: BUILD_PREFIX (default <repo>/build), JOBS (default 2), CTEST_ARGS (extra ctest
# arguments, e.g. "-R reliability").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
which=${1:-all}
prefix=${BUILD_PREFIX:-$root/build}
jobs=${JOBS:-2}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Tests that cannot hold in a sanitized build, by design: the shipped libcachalot.so then needs
# libasan/libubsan (DT_NEEDED and version checks), and an unsanitized consumer project cannot link the
# sanitized static library (install test) nor the docs' C snippets the sanitized shared one.
# The subproject test builds its own unsanitized tree (CMake logic only: nothing to sanitize).
# (The dlopen test opens the library with RTLD_NODELETE, as frameworks keep it, so it runs
# under ASan too.)
exclude='^(install_find_package|SharedLibraryElf\.(NeedsOnlyTheCLibrary|RequiresNoCxxRuntimeVersion)|docs_snippets|subproject_build)$'

run() {  # run <name> <sanitizers>
  local dir="$prefix-$1"
  echo "=== $1 ($2) in $dir"
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCACHALOT_SANITIZE="$2" -DCACHALOT_CUDA=AUTO -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
    -DCACHALOT_BUILD_BENCHMARKS=OFF -DCACHALOT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$dir" -j "$jobs"
  # shellcheck disable=SC2086
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" -E "$exclude" ${CTEST_ARGS:-}
}

case "$which" in
  asan) run asan address,undefined ;;
  tsan) run tsan thread ;;
  all) run asan address,undefined && run tsan thread ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
