#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan+UBSan, library instrumented for coverage) in
# <prefix>-fuzz and runs each from its seed corpus for FUZZ_SECONDS (default 60), as JOBS
# fuzzing processes (libFuzzer's -fork: one per core, sharing the corpus; FUZZ_FORK=0 runs one
# plain process). New inputs go to <prefix>-fuzz/corpus-<target>, never into the repository; a
# crash is saved as <prefix>-fuzz/artifacts/<target>-crash-* and fails the script (add it under
# tests/fuzz/regressions/<target>/ with a name, plus a named test, once fixed). Prints the
# executions of each target.
#   scripts/fuzz.sh [ops|config|engine|all]        (default all)
# Environment: BUILD_PREFIX (default <repo>/build), JOBS (default 2), FUZZ_SECONDS, FUZZ_FORK.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
which=${1:-all}
dir=${BUILD_PREFIX:-$root/build}-fuzz
jobs=${JOBS:-2}
seconds=${FUZZ_SECONDS:-60}
fork=${FUZZ_FORK:-$jobs}
cxx=${CXX_FUZZ:-$(command -v clang++-14 || command -v clang++)}
cc=${CC_FUZZ:-$(command -v clang-14 || command -v clang)}

cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" -DCACHALOT_FUZZ=ON \
  -DCACHALOT_SANITIZE=address,undefined -DCACHALOT_CUDA=OFF \
  -DCACHALOT_BUILD_BENCHMARKS=OFF -DCACHALOT_BUILD_EXAMPLES=OFF >/dev/null
targets=(ops config engine)
[[ $which != all ]] && targets=("$which")
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/cachalot_fuzz_}"

mkdir -p "$dir/artifacts"
for t in "${targets[@]}"; do
  mkdir -p "$dir/corpus-$t"
  echo "=== fuzzing $t for ${seconds}s"
  # No leak check per input: C-API tombstones outlive each run by design, which would make
  # libFuzzer run LeakSanitizer after every input; the ASan test suite checks leaks.
  forking=()
  [[ $fork -gt 1 ]] && forking=(-fork="$fork")
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} \
    "$dir/tests/fuzz/cachalot_fuzz_$t" ${forking[@]+"${forking[@]}"} -max_total_time="$seconds" \
    -print_final_stats=1 -detect_leaks=0 -max_len=4096 -artifact_prefix="$dir/artifacts/$t-" \
    "$dir/corpus-$t" "$root/tests/fuzz/corpus/$t" >"$dir/fuzz-$t.log" 2>&1 || {
      tail -50 "$dir/fuzz-$t.log"
      echo "fuzz $t: FAILED (artifacts in $dir/artifacts)" >&2
      exit 1
    }
  # One process prints its final stats; -fork prints the running total on its "#N:" lines.
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/fuzz-$t.log" | grep -o '[0-9]*$' ||
    true)
  [[ -z $runs ]] && runs=$(grep -o '^#[0-9]*:' "$dir/fuzz-$t.log" | tail -1 | tr -d '#:' || true)
  echo "fuzz $t: OK, ${runs:-?} executions in ${seconds} s (${fork} process(es)), corpus" \
    "$(ls "$dir/corpus-$t" | wc -l) inputs"
done
