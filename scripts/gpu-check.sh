#!/usr/bin/env bash
# One-call GPU check for cachalot, sized for a single run of at most 8 minutes on a GPU machine
# (an H200 in the project's plan) that has nvcc, cmake, ninja and python with torch and cupy, but
# perhaps not GoogleTest, fmt or Google Benchmark. It expects the folder build-gpu/ made by
# scripts/build-gpu-carry.sh on the build machine and carried along.
#
# Carried or rebuilt: it runs the carried binaries when this machine can: its glibc and
# libstdc++ are at least the floors in build-gpu/MANIFEST (the highest symbol versions the
# carried files ask for), and the carried CUDA runtime sees a device where nvidia-smi lists one.
# Otherwise it rebuilds here, with this machine's toolkit, from build-gpu/deps (fmt headers,
# GoogleTest sources, Google Benchmark) into build-gpu-local/: warnings not fatal, every target
# it can (ninja -k 0), within GPU_CHECK_REBUILD_S (default: the budget less 180 s; the rebuild's
# time counts against the budget). It prints which it chose and why. GPU_CHECK_MODE=carried or
# GPU_CHECK_MODE=rebuild forces one; GPU_CHECK_CMAKE_ARGS adds configure arguments to a rebuild.
#
# Every step of the list below is a row of the results, whatever happens: PASS; SKIP (reason);
# FAIL (rc N); TIMEOUT; NOT BUILT (reason) when its binary is missing (not carried, or its
# rebuild failed); NOT RUN (reason) when the overall budget (GPU_CHECK_BUDGET_S, default 450 s)
# is used up. Exit status: 0 when every row is PASS or SKIP, 1 otherwise.
# The steps: the ABI of libcachalot.so; the hook tests (simulated and GPU); the default
# allocator/adapter tests; the CUDA backend and allocator tests (with the round trip of a tenant
# pool's sleep(offload) and wake: kernels, another tenant filling the device, a CUDA graph
# captured before the sleep replayed after the wake); the driver ABI check
# (declarations against cuda.h, the loader's requests on the fake driver, the real driver's
# entry points); the driver-API context rule (fresh process) and the driver backend against the
# CUDA runtime; the device cost model's latencies (cachalot_device_costs, its config line checked
# by scripts/check_cost_line.py against the contract and cachalot's own parser); the core and C
# API suites; the Python package's GPU checks (python/tests/gpu_check.py: PyTorch and CuPy
# through cachalot.torch / cachalot.cupy); the C++ and
# C examples, the PyTorch and CuPy examples; tools/gpu_hotpath (the hot path against cudaMalloc and
# a warm cudaMallocAsync pool); cachalot_bench's GPU baselines (cudaMalloc, cudaMallocAsync, CUB)
# beside cachalot on the same workloads.
# Output: the full log, and at the end a results block for docs/gpu-results.md (its format is
# described there); both are also written to $OUT (gpu-check.log, gpu-results-block.md) when
# OUT is set. `scripts/gpu-check.sh --list` prints the step names and exits; `--decide` prints
# the choice between carried and rebuilt binaries, and why, and exits.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/gpu-kit.sh
source "$ROOT/scripts/gpu-kit.sh"

STEPS=(
  "ABI of libcachalot.so"
  "hooks, simulated device"
  "hooks, GPU"
  "default allocators and adapters"
  "CUDA backend and allocator"
  "driver ABI: declarations vs cuda.h, loader requests, real driver"
  "driver backend: context rule (fresh process)"
  "driver backend vs CUDA runtime: segments, map/unmap, event query"
  "device cost model: driver call latencies"
  "core suite (incl. conformance)"
  "C API suite"
  "Python package: PyTorch (gpu_check.py torch)"
  "Python package: CuPy (gpu_check.py cupy)"
  "example: inference_engine"
  "example: c_shim"
  "example: PyTorch pluggable allocator"
  "example: CuPy allocator"
  "hot path vs cudaMalloc / cudaMallocAsync"
  "GPU baselines: cudaMalloc, cudaMallocAsync, CUB (cachalot_bench)"
)
if [[ ${1:-} == --list ]]; then
  printf '%s\n' "${STEPS[@]}"
  exit 0
fi

BUDGET=${GPU_CHECK_BUDGET_S:-450}
START=$(date +%s)
OUT_DIR=${OUT:-}
LOG=${OUT_DIR:+$OUT_DIR/gpu-check.log}
LOG=${LOG:-/tmp/cachalot-gpu-check.log}
[[ -n $OUT_DIR ]] && mkdir -p "$OUT_DIR"
exec > >(tee "$LOG") 2>&1

RESULTS=()
FAILED=0
NOTES=()
declare -A NOT_BUILT_WHY=()
declare -A TABLES=()
STEP_OUT=$(mktemp)
trap 'rm -f "$STEP_OUT"' EXIT

remaining() { echo $((BUDGET - ($(date +%s) - START))); }

row() {  # row NAME RESULT SECONDS NOTES
  local result=${2//|//} notes=${4:-}
  RESULTS+=("| $1 | $result | $3 | ${notes//|//} |")
  [[ $result == PASS || $result == SKIP* ]] || FAILED=1
}

# The reason a run that exited 77 or skipped every test gave: a GoogleTest skip message (the
# line after "...: Skipped"), else the last line it printed.
skip_reason() {
  local why
  why=$(awk 'found {print; exit} /: Skipped$/ {found = 1}' "$STEP_OUT")
  [[ -z $why ]] && why=$(grep -v '^\s*$' "$STEP_OUT" | tail -n 1)
  echo "${why:-no reason printed}"
}

# step NAME LIMIT_S "NEEDED FILES" CMD...: one row. A needed file that is missing makes it NOT
# BUILT (with the reason); otherwise CMD runs with a time limit (never past the deadline), its
# output in the log and in $STEP_OUT, and gives PASS (0; SKIP if every GoogleTest test skipped),
# SKIP (77), TIMEOUT or FAIL.
step() {
  local name=$1 limit=$2 needs=$3
  shift 3
  local f
  for f in $needs; do
    if [[ ! -e $f ]]; then
      local base
      base=$(basename "$f")
      row "$name" "NOT BUILT (${NOT_BUILT_WHY[$base]:-$base is not in $(dirname "$f")})" 0
      : >"$STEP_OUT"
      return
    fi
  done
  local left
  left=$(($(remaining) - 15))
  if ((left < 5)); then
    row "$name" "NOT RUN (overall time budget of ${BUDGET} s used up)" 0
    : >"$STEP_OUT"
    return
  fi
  ((limit > left)) && limit=$left
  echo
  echo "===== $name (limit ${limit}s) ====="
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$STEP_OUT"
  rc=${PIPESTATUS[0]}
  local secs=$(($(date +%s) - t0))
  local note
  note=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$STEP_OUT" | tr '\n' ' ' |
    sed 's/\[  //g; s/ *\]//g; s/, listed below://g; s/  */ /g')
  case $rc in
    0)
      if grep -q '^\[  SKIPPED \]' "$STEP_OUT" && ! grep -q '^\[  PASSED  \] [1-9]' "$STEP_OUT"; then
        row "$name" "SKIP ($(skip_reason))" "$secs" "$note"
      else
        row "$name" PASS "$secs" "$note"
      fi
      ;;
    77) row "$name" "SKIP ($(skip_reason))" "$secs" "$note" ;;
    124 | 137) row "$name" TIMEOUT "$secs" "$note" ;;
    *) row "$name" "FAIL (rc $rc)" "$secs" "$note" ;;
  esac
}

echo "cachalot gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
GPU_LIST=$(nvidia-smi -L 2>&1) || GPU_LIST=""
echo "${GPU_LIST:-nvidia-smi lists no GPU}"
GPU_DESC=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -n 1)
[[ -f build-gpu/MANIFEST ]] && { echo "carried build:"; sed 's/^/  /' build-gpu/MANIFEST; }

# --- Choose the binaries: carried, or rebuilt here ---------------------------------------
manifest() { sed -n "s/^$1: //p" build-gpu/MANIFEST 2>/dev/null | head -n 1; }
MACHINE_GLIBC=$(gpu_kit_machine_glibc)
MACHINE_GLIBCXX=$(gpu_kit_machine_glibcxx)
GLIBC_FLOOR=$(manifest glibc_floor)
GLIBCXX_FLOOR=$(manifest glibcxx_floor)
MODE=carried
WHY=""
if [[ ${GPU_CHECK_MODE:-} == carried || ${GPU_CHECK_MODE:-} == rebuild ]]; then
  MODE=$GPU_CHECK_MODE
  WHY="GPU_CHECK_MODE=$GPU_CHECK_MODE"
elif [[ ! -f build-gpu/MANIFEST || ! -d build-gpu/bin ]]; then
  MODE=rebuild
  WHY="no carried build-gpu/ (MANIFEST and bin/)"
elif [[ -z $GLIBC_FLOOR ]]; then
  MODE=rebuild
  WHY="build-gpu/MANIFEST states no glibc_floor (a bundle from before the floor was recorded)"
elif [[ $GLIBC_FLOOR != none ]] && ! gpu_kit_version_ge "${MACHINE_GLIBC:-0}" "$GLIBC_FLOOR"; then
  MODE=rebuild
  WHY="the carried binaries need glibc >= $GLIBC_FLOOR, this machine has ${MACHINE_GLIBC:-an unknown one}"
elif [[ -n $GLIBCXX_FLOOR && $GLIBCXX_FLOOR != none ]] &&
  ! gpu_kit_version_ge "${MACHINE_GLIBCXX:-0}" "$GLIBCXX_FLOOR"; then
  MODE=rebuild
  WHY="carried libraries need libstdc++ GLIBCXX_$GLIBCXX_FLOOR, this machine's has ${MACHINE_GLIBCXX:-none}"
elif [[ ! -x build-gpu/bin/gpu_hotpath ]]; then
  WHY="glibc $MACHINE_GLIBC >= floor $GLIBC_FLOOR; no carried gpu_hotpath to probe the CUDA runtime with"
elif probe=$(build-gpu/bin/gpu_hotpath --probe 2>&1); then
  WHY="glibc $MACHINE_GLIBC >= floor $GLIBC_FLOOR, and the carried CUDA runtime sees the GPU ($probe)"
elif [[ -n $GPU_LIST ]]; then
  MODE=rebuild
  WHY="the carried CUDA runtime sees no device while nvidia-smi lists one (driver older than the runtime?): $probe"
else
  WHY="glibc $MACHINE_GLIBC >= floor $GLIBC_FLOOR; no GPU here (probe: $probe): steps that need one skip"
fi
echo "mode: $MODE, because $WHY"
[[ ${1:-} == --decide ]] && exit 0

BIN=$ROOT/build-gpu/bin
LIB=$ROOT/build-gpu/lib/libcachalot.so
FAKE=$ROOT/build-gpu/fake/libcachalot_fakecuda.so

# The rebuild gets at most GPU_CHECK_REBUILD_S (default: the budget less 180 s, so that the steps
# keep time to run): a target not finished by then is NOT BUILT, saying so.
REBUILD_LIMIT=${GPU_CHECK_REBUILD_S:-$((BUDGET - 180))}
rebuild() {
  local local_dir=$ROOT/build-gpu-local jobs log deadline
  jobs=$(nproc)
  log=$local_dir/build.log
  deadline=$(($(date +%s) + REBUILD_LIMIT))
  mkdir -p "$local_dir/bin"
  : >"$log"
  echo "rebuilding into $local_dir (log: $log; at most $REBUILD_LIMIT s)"
  nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude tools/gpu_hotpath.cu -o "$local_dir/bin/gpu_hotpath" \
    -ldl >>"$log" 2>&1 || NOT_BUILT_WHY[gpu_hotpath]="nvcc could not build tools/gpu_hotpath.cu (see $log)"
  local cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCACHALOT_CUDA=ON -DCACHALOT_WERROR=OFF
    -DCACHALOT_BUILD_TESTS=ON -DCACHALOT_BUILD_BENCHMARKS=ON -DCACHALOT_BUILD_EXAMPLES=ON
    -DCMAKE_CUDA_ARCHITECTURES=90)
  # shellcheck disable=SC2206  # GPU_CHECK_CMAKE_ARGS: extra configure arguments, split on spaces
  cmake_args+=(${GPU_CHECK_CMAKE_ARGS:-})
  [[ -f build-gpu/deps/fmt/fmt-config.cmake ]] && cmake_args+=(-Dfmt_DIR="$ROOT/build-gpu/deps/fmt")
  [[ -f build-gpu/deps/benchmark/benchmarkConfig.cmake ]] &&
    cmake_args+=(-Dbenchmark_DIR="$ROOT/build-gpu/deps/benchmark")
  if [[ -d build-gpu/deps/googletest-src ]]; then
    local prefix=$local_dir/gtest config
    if cmake -S build-gpu/deps/googletest-src -B "$local_dir/gtest-build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
      -DCMAKE_INSTALL_PREFIX="$prefix" >>"$log" 2>&1 &&
      cmake --build "$local_dir/gtest-build" -j "$jobs" >>"$log" 2>&1 &&
      cmake --install "$local_dir/gtest-build" >>"$log" 2>&1; then
      # lib/ or lib64/, whichever the GNU install dirs chose here.
      config=$(find "$prefix" -name GTestConfig.cmake -print -quit)
      [[ -n $config ]] && cmake_args+=(-DGTest_DIR="$(dirname "$config")")
    else
      echo "rebuild: GoogleTest from build-gpu/deps did not build (see $log)"
    fi
  fi
  if ! cmake -S "$ROOT" -B "$local_dir/tree" "${cmake_args[@]}" >>"$log" 2>&1; then
    # The first CMake error with its message (the lines up to the blank one after it).
    local why
    why="configure failed: $(awk '/CMake Error/ {e = 1} e && /^$/ {exit} e {printf "%s ", $0}' \
      "$log" | tr -s ' ' | cut -c1-200)"
    for t in "${GPU_KIT_TARGETS[@]}" "${GPU_KIT_LIBRARIES[@]}"; do NOT_BUILT_WHY[$t]=$why; done
    return 1
  fi
  local defined targets=()
  defined=$(ninja -C "$local_dir/tree" -t targets all | sed 's/:.*//')
  for t in "${GPU_KIT_TARGETS[@]}" "${GPU_KIT_LIBRARIES[@]}"; do
    if grep -qx "$t" <<<"$defined"; then
      targets+=("$t")
    else
      NOT_BUILT_WHY[$t]="not configured here (its dependency missing? see $log)"
    fi
  done
  local built=1 rc=0 left
  left=$((deadline - $(date +%s)))
  ((left > 0)) || left=1
  timeout --kill-after=5 "$left" ninja -C "$local_dir/tree" -k 0 -j "$jobs" "${targets[@]}" \
    >>"$log" 2>&1 || rc=$?
  ((rc == 0)) || built=0
  local failed_why
  if ((rc == 124 || rc == 137)); then
    failed_why="the rebuild was stopped at its time limit of $REBUILD_LIMIT s (GPU_CHECK_REBUILD_S)"
  else
    failed_why="its build failed here: $(grep -m 1 'error' "$log" | cut -c1-160)"
  fi
  ((built)) || echo "rebuild: some targets were not built: $failed_why (see $log)"
  for t in "${targets[@]}"; do
    # After a failed or stopped build, a target with work left is one that was not built.
    if ((!built)) && ! ninja -C "$local_dir/tree" -n "$t" | grep 'no work to do' >/dev/null; then
      NOT_BUILT_WHY[$t]=$failed_why
      continue
    fi
    local f
    f=$(find "$local_dir/tree" -type f -name "$t" -perm -u+x | head -n 1)
    [[ -n $f ]] && cp "$f" "$local_dir/bin/"
  done
  return 0
}

if [[ $MODE == rebuild ]]; then
  t0=$(date +%s)
  rebuild
  # The libraries' rows name their files.
  [[ -n ${NOT_BUILT_WHY[cachalot_shared]:-} ]] && NOT_BUILT_WHY[libcachalot.so]=${NOT_BUILT_WHY[cachalot_shared]}
  [[ -n ${NOT_BUILT_WHY[cachalot_fakecuda]:-} ]] &&
    NOT_BUILT_WHY[libcachalot_fakecuda.so]=${NOT_BUILT_WHY[cachalot_fakecuda]}
  NOTES+=("Rebuilt on this machine in $(($(date +%s) - t0)) s (warnings not fatal).")
  BIN=$ROOT/build-gpu-local/bin
  LIB=$ROOT/build-gpu-local/tree/src/libcachalot.so
  FAKE=$ROOT/build-gpu-local/tree/tests/cuda/libcachalot_fakecuda.so
fi
LIBDIR=$(dirname "$LIB")
export LD_LIBRARY_PATH=$LIBDIR:$ROOT/build-gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "binaries: $BIN, library: $LIB"

b() { echo "$BIN/$1"; }
PY=${PYTHON:-python3}
PYPKG_ENV=(env PYTHONPATH="$ROOT/python" CACHALOT_LIBRARY="$LIB")

# --- Tests ----------------------------------------------------------------------------------
step "${STEPS[0]}" 60 "$(b cachalot_exports_test) $LIB" \
  env CACHALOT_LIBRARY="$LIB" "$(b cachalot_exports_test)"
step "${STEPS[1]}" 60 "$(b cachalot_hooks_test)" \
  env CACHALOT_CONF=backend:simulated,capacity:8GiB "$(b cachalot_hooks_test)"
step "${STEPS[2]}" 90 "$(b cachalot_hooks_test)" \
  env CACHALOT_CONF=backend:cuda CACHALOT_TEST_HOOKS_GPU=1 "$(b cachalot_hooks_test)"
step "${STEPS[3]}" 60 "$(b cachalot_default_adapters_test)" \
  env CACHALOT_CONF=backend:simulated,capacity:4GiB "$(b cachalot_default_adapters_test)"
step "${STEPS[4]}" 180 "$(b cachalot_cuda_backend_test)" "$(b cachalot_cuda_backend_test)"
step "${STEPS[5]}" 30 "$(b cachalot_driver_abi_test) $FAKE" \
  "$(b cachalot_driver_abi_test)" --fake "$FAKE"
# A fresh process each: the context checks must run before anything else touched CUDA.
step "${STEPS[6]}" 60 "$(b cachalot_gpu_driver_check)" "$(b cachalot_gpu_driver_check)" --contexts
step "${STEPS[7]}" 90 "$(b cachalot_gpu_driver_check)" "$(b cachalot_gpu_driver_check)" --bench
TABLES[driver]=$(grep -E '^\|' "$STEP_OUT")
step "${STEPS[8]}" 90 "$(b cachalot_device_costs) $LIB" \
  "$PY" scripts/check_cost_line.py --library "$LIB" --run "$(b cachalot_device_costs)"
TABLES[costs]=$(grep -E '^(\||device_costs: )' "$STEP_OUT")
COST_LINE=$(grep -E '^cost-model config: ' "$STEP_OUT" | head -n 1)
step "${STEPS[9]}" 150 "$(b core_tests)" "$(b core_tests)"
step "${STEPS[10]}" 60 "$(b c_api_tests)" "$(b c_api_tests)"

# --- Python package: cachalot.torch / cachalot.cupy on the GPU (issue 8) ---------------------
# The first run builds the PyTorch extension (cached by torch.utils.cpp_extension afterwards).
step "${STEPS[11]}" 240 "$LIB" "${PYPKG_ENV[@]}" "$PY" python/tests/gpu_check.py torch
step "${STEPS[12]}" 90 "$LIB" "${PYPKG_ENV[@]}" "$PY" python/tests/gpu_check.py cupy

# --- Examples -------------------------------------------------------------------------------
step "${STEPS[13]}" 60 "$(b inference_engine)" "$(b inference_engine)" --steps 50
step "${STEPS[14]}" 30 "$(b c_shim)" "$(b c_shim)"
step "${STEPS[15]}" 150 "$LIB" "${PYPKG_ENV[@]}" "$PY" examples/pytorch_pluggable.py
step "${STEPS[16]}" 120 "$LIB" "${PYPKG_ENV[@]}" "$PY" examples/cupy_allocator.py

# --- Hot path and the GPU baselines ------------------------------------------------------------
step "${STEPS[17]}" 120 "$(b gpu_hotpath) $LIB" "$(b gpu_hotpath)" "$LIB"
TABLES[hotpath]=$(grep -E '^(\||Device:)' "$STEP_OUT")
# cachalot_bench registers the baselines only where the CUDA runtime sees a device: skip (77)
# with its reason otherwise, before running anything.
BENCH_FILTER='^(hot_pair/(cachalot|cudaMalloc|cudaMallocAsync|cub)/(4096|262144|2097152|16777216)|random/(cachalot|cudaMalloc|cudaMallocAsync|cub)/n:10000/max_mib:(4|64))$'
step "${STEPS[18]}" 150 "$(b cachalot_bench)" bash -c '
  listed=$("$1" --benchmark_list_tests=true --benchmark_filter="$2" 2>&1)
  if grep -q "GPU baselines skipped" <<<"$listed"; then grep "GPU baselines skipped" <<<"$listed"; exit 77; fi
  exec "$1" --benchmark_filter="$2" --benchmark_min_time=0.05 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true' _ "$(b cachalot_bench)" "$BENCH_FILTER"
TABLES[baselines]=$(grep -E '^(hot_pair|random)/.*_median' "$STEP_OUT")

# --- Results block --------------------------------------------------------------------------
block() {
  echo "## GPU run $(date -u +%Y-%m-%d)"
  echo
  echo "- GPU: ${GPU_DESC:-none (nvidia-smi lists no GPU)}"
  echo "- Binaries: $MODE, because $WHY"
  echo "- Bundle: $(manifest commit || true) (glibc floor ${GLIBC_FLOOR:-?}, GLIBCXX floor" \
    "${GLIBCXX_FLOOR:-?}); this machine: glibc ${MACHINE_GLIBC:-?}, GLIBCXX ${MACHINE_GLIBCXX:-?}"
  echo "- Total time: $(($(date +%s) - START)) s (budget ${BUDGET} s)"
  local n
  for n in "${NOTES[@]}"; do echo "- $n"; done
  echo
  echo "| step | result | seconds | notes |"
  echo "|---|---|---|---|"
  printf '%s\n' "${RESULTS[@]}"
  if [[ -n $COST_LINE ]]; then
    echo
    echo "### Device cost model (cachalot_device_costs; host wall clock, medians)"
    echo
    echo "${TABLES[costs]}"
    echo
    echo "\`$COST_LINE\`"
  fi
  if [[ -n ${TABLES[hotpath]} ]]; then
    echo
    echo "### Hot path (µs per allocate+free pair, host wall clock, median of 5)"
    echo
    echo "${TABLES[hotpath]}"
  fi
  if [[ -n ${TABLES[driver]} ]]; then
    echo
    echo "### Driver-API backend against the CUDA runtime (µs per operation, host wall clock, medians)"
    echo
    echo "${TABLES[driver]}"
  fi
  if [[ -n ${TABLES[baselines]} ]]; then
    echo
    echo "### GPU baselines beside cachalot (cachalot_bench, medians of 3)"
    echo
    echo '```'
    echo "${TABLES[baselines]}"
    echo '```'
  fi
}
echo
echo "===================== results for docs/gpu-results.md ====================="
block | tee ${OUT_DIR:+"$OUT_DIR/gpu-results-block.md"}
echo "==========================================================================="
exit $FAILED
