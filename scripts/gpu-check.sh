#!/usr/bin/env bash
# One-call GPU check for cachalot, sized for a single run of at most 8 minutes on a GPU
# machine (an H200 in the project's plan) that has nvcc, cmake, ninja and python with torch
# and cupy, but perhaps not GoogleTest or fmt. It expects the folder build-gpu/ made by
# scripts/build-gpu-carry.sh on the build machine and carried along; when that is missing, or
# its CUDA runtime is newer than this machine's driver, it rebuilds here with this machine's
# toolkit from build-gpu/deps (fmt headers, GoogleTest sources) into build-gpu-local/.
# It runs: the ABI test of libcachalot.so, the hook tests (simulated and GPU), the default
# allocator/adapter tests, the CUDA backend and allocator tests, the driver-API checks
# (cachalot_driver_abi_test; cachalot_gpu_driver_check --contexts in a fresh process: a thread
# without a context keeps none, no context on GPU 0 when only GPU 1 is used, a thread on GPU 0
# stays there; --bench: segment alloc/free through the driver backend against cudaMalloc/cudaFree,
# map_chunk/unmap_chunk of 2 MiB and 20 MiB chunks), the core and C API suites if carried, the
# Python package's GPU checks (python/tests/gpu_check.py: PyTorch and CuPy through
# cachalot.torch / cachalot.cupy), the C++ and C examples, the PyTorch and CuPy examples, and tools/gpu_hotpath (the hot path against
# cudaMalloc/cudaFree and a warm cudaMallocAsync pool, and caching:0 against cudaMalloc/cudaFree).
# Every step has a time limit within one overall deadline (GPU_CHECK_BUDGET_S, default 450 s).
# libcachalot.so itself needs only a CUDA 11.3+ driver (it loads libcuda.so.1 at run time); the
# carried test binaries link the CUDA 13 runtime and need a CUDA 13 driver, hence the probe.
# Output: the full log, and at the end a results block ready for docs/gpu-results.md; both
# are also written to $OUT (gpu-check.log, gpu-results-block.md) when OUT is set.
# GPU_CHECK_MODE=carried forces the carried binaries (no probe, no rebuild).
# Exit status: 0 when no step failed (skips allowed), 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUDGET=${GPU_CHECK_BUDGET_S:-450}
START=$(date +%s)
OUT_DIR=${OUT:-}
LOG=${OUT_DIR:+$OUT_DIR/gpu-check.log}
LOG=${LOG:-/tmp/cachalot-gpu-check.log}
[[ -n $OUT_DIR ]] && mkdir -p "$OUT_DIR"
exec > >(tee "$LOG") 2>&1

RESULTS=()
FAILED=0
HOTPATH_TABLE=""
DRIVER_TABLE=""
EXTRA_NOTES=()

remaining() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME LIMIT_S CMD...: runs CMD with a time limit (never past the deadline) and records
# PASS (0), SKIP (77, or a gtest run whose tests all skipped), TIMEOUT or FAIL.
step() {
  local name=$1 limit=$2
  shift 2
  local left
  left=$(($(remaining) - 15))
  if ((left < 5)); then
    RESULTS+=("| $name | NOT RUN | 0 | overall time budget used up |")
    return
  fi
  ((limit > left)) && limit=$left
  echo
  echo "===== $name (limit ${limit}s) ====="
  local t0 rc out
  t0=$(date +%s)
  out=$(mktemp)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  local secs=$(($(date +%s) - t0))
  local note
  note=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out" | tr '\n' ' ' |
         sed 's/\[  //g; s/ *\]//g; s/, listed below://g; s/  */ /g')
  local status
  case $rc in
    0) status=PASS ;;
    77) status=SKIP; note="${note}$(tail -n 1 "$out")" ;;
    124|137) status=TIMEOUT; FAILED=1 ;;
    *) status="FAIL (rc $rc)"; FAILED=1 ;;
  esac
  if [[ $status == PASS ]] && grep -q '^\[  SKIPPED \]' "$out" && ! grep -q '^\[  PASSED  \] [1-9]' "$out"; then
    status=SKIP
  fi
  RESULTS+=("| $name | $status | $secs | ${note:-} |")
  rm -f "$out"
}

echo "cachalot gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
nvidia-smi -L 2>&1 || echo "nvidia-smi unavailable"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
[[ -f build-gpu/MANIFEST ]] && { echo "carried build:"; sed 's/^/  /' build-gpu/MANIFEST; }

# --- Choose the binaries: carried, or rebuilt here ---------------------------------------
MODE=carried
BIN=$ROOT/build-gpu/bin
LIB=$ROOT/build-gpu/lib/libcachalot.so
if [[ ${GPU_CHECK_MODE:-} == carried ]]; then
  echo "GPU_CHECK_MODE=carried: using build-gpu/ as is"
elif [[ ! -x $BIN/gpu_hotpath ]]; then
  MODE=rebuild
  echo "no carried build-gpu/: rebuilding here"
elif ! "$BIN/gpu_hotpath" --probe; then
  MODE=rebuild
  echo "the carried binaries see no device (driver older than their CUDA runtime?): rebuilding"
fi

rebuild() {
  local local_dir=$ROOT/build-gpu-local
  local jobs
  jobs=$(nproc)
  mkdir -p "$local_dir/bin"
  local cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCACHALOT_CUDA=ON
    -DCACHALOT_BUILD_BENCHMARKS=OFF -DCACHALOT_BUILD_EXAMPLES=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  [[ -f build-gpu/deps/fmt/fmt-config.cmake ]] && cmake_args+=(-Dfmt_DIR="$ROOT/build-gpu/deps/fmt")
  if [[ -d build-gpu/deps/googletest-src ]]; then
    cmake -S build-gpu/deps/googletest-src -B "$local_dir/gtest-build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
      -DCMAKE_INSTALL_PREFIX="$local_dir/gtest" >/dev/null &&
      cmake --build "$local_dir/gtest-build" -j "$jobs" >/dev/null &&
      cmake --install "$local_dir/gtest-build" >/dev/null &&
      cmake_args+=(-DGTest_DIR="$local_dir/gtest/lib/cmake/GTest")
  fi
  cmake -S "$ROOT" -B "$local_dir/tree" "${cmake_args[@]}" || return 1
  local targets=(cachalot_shared cachalot_exports_test cachalot_hooks_test
    cachalot_default_adapters_test cachalot_cuda_backend_test cachalot_driver_abi_test
    cachalot_gpu_driver_check inference_engine c_shim)
  for optional in core_tests c_api_tests; do
    # not grep -q: an early exit would SIGPIPE ninja and, with pipefail, drop the target
    ninja -C "$local_dir/tree" -t targets all | grep "^${optional}:" >/dev/null && targets+=("$optional")
  done
  ninja -C "$local_dir/tree" -j "$jobs" "${targets[@]}" || return 1
  for t in "${targets[@]}"; do
    local f
    f=$(find "$local_dir/tree" -type f -name "$t" -perm -u+x | head -n 1)
    [[ -n $f ]] && cp "$f" "$local_dir/bin/"
  done
  return 0
}

if [[ $MODE == rebuild ]]; then
  LOCAL=$ROOT/build-gpu-local
  mkdir -p "$LOCAL/bin"
  nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude tools/gpu_hotpath.cu -o "$LOCAL/bin/gpu_hotpath" -ldl ||
    echo "nvcc could not build tools/gpu_hotpath.cu"
  if rebuild; then
    LIB=$LOCAL/tree/src/libcachalot.so
  else
    EXTRA_NOTES+=("Rebuild on the GPU machine failed (missing GoogleTest/fmt?): only gpu_hotpath ran, if a libcachalot.so existed.")
    LIB=$(ls "$ROOT"/build-gpu/lib/libcachalot.so "$LOCAL"/tree/src/libcachalot.so 2>/dev/null | head -n 1)
  fi
  BIN=$LOCAL/bin
fi
LIBDIR=$(dirname "${LIB:-/nonexistent/x}")
export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "mode: $MODE, binaries: $BIN, library: ${LIB:-none}"

have() { [[ -x $BIN/$1 ]]; }

# --- Tests ----------------------------------------------------------------------------------
have cachalot_exports_test && step "ABI of libcachalot.so" 60 \
  env CACHALOT_LIBRARY="$LIB" "$BIN/cachalot_exports_test"
have cachalot_hooks_test && step "hooks, simulated device" 60 \
  env CACHALOT_CONF=backend:simulated,capacity:8GiB "$BIN/cachalot_hooks_test"
have cachalot_hooks_test && step "hooks, GPU" 90 \
  env CACHALOT_CONF=backend:cuda CACHALOT_TEST_HOOKS_GPU=1 "$BIN/cachalot_hooks_test"
have cachalot_default_adapters_test && step "default allocators and adapters" 60 \
  env CACHALOT_CONF=backend:simulated,capacity:4GiB "$BIN/cachalot_default_adapters_test"
have cachalot_cuda_backend_test && step "CUDA backend and allocator" 180 \
  "$BIN/cachalot_cuda_backend_test"
have cachalot_driver_abi_test && step "driver ABI declarations vs cuda.h" 20 \
  "$BIN/cachalot_driver_abi_test"
# A fresh process each: the context checks must run before anything else touched CUDA.
have cachalot_gpu_driver_check && step "driver backend: context rule (fresh process)" 60 \
  "$BIN/cachalot_gpu_driver_check" --contexts
if have cachalot_gpu_driver_check; then
  drv=$(mktemp)
  step "driver backend vs CUDA runtime: segments, map/unmap, event query" 90 \
    bash -c "set -o pipefail; '$BIN/cachalot_gpu_driver_check' --bench | tee '$drv'"
  DRIVER_TABLE=$(grep -E '^\|' "$drv")
  rm -f "$drv"
fi
have core_tests && step "core suite (incl. conformance)" 150 "$BIN/core_tests"
have c_api_tests && step "C API suite" 60 "$BIN/c_api_tests"

# --- Python package: cachalot.torch / cachalot.cupy on the GPU (issue 8) ---------------------
# The first run builds the PyTorch extension (cached by torch.utils.cpp_extension afterwards).
PYPKG_ENV=(env PYTHONPATH="$ROOT/python" CACHALOT_LIBRARY="$LIB")
step "Python package: PyTorch (gpu_check.py torch)" 240 \
  "${PYPKG_ENV[@]}" "${PYTHON:-python3}" python/tests/gpu_check.py torch
step "Python package: CuPy (gpu_check.py cupy)" 90 \
  "${PYPKG_ENV[@]}" "${PYTHON:-python3}" python/tests/gpu_check.py cupy

# --- Examples -------------------------------------------------------------------------------
have inference_engine && step "example: inference_engine" 60 "$BIN/inference_engine" --steps 50
have c_shim && step "example: c_shim" 30 "$BIN/c_shim"
PY=${PYTHON:-python3}
step "example: PyTorch pluggable allocator" 150 \
  env CACHALOT_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" "$PY" examples/pytorch_pluggable.py
step "example: CuPy allocator" 120 \
  env CACHALOT_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" "$PY" examples/cupy_allocator.py

# --- Hot path -------------------------------------------------------------------------------
if have gpu_hotpath && [[ -n ${LIB:-} && -f $LIB ]]; then
  hot=$(mktemp)
  step "hot path vs cudaMalloc / cudaMallocAsync" 120 \
    bash -c "set -o pipefail; '$BIN/gpu_hotpath' '$LIB' | tee '$hot'"
  HOTPATH_TABLE=$(grep -E '^(\||Device:)' "$hot")
  rm -f "$hot"
fi

# --- Results block --------------------------------------------------------------------------
block() {
  echo "## GPU run $(date -u +%Y-%m-%d)"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "- Binaries: $MODE$( [[ -f build-gpu/MANIFEST ]] && echo " ($(grep commit build-gpu/MANIFEST))")"
  echo "- Total time: $(($(date +%s) - START)) s"
  for n in "${EXTRA_NOTES[@]}"; do echo "- $n"; done
  echo
  echo "| step | result | seconds | notes |"
  echo "|---|---|---|---|"
  printf '%s\n' "${RESULTS[@]}"
  if [[ -n $HOTPATH_TABLE ]]; then
    echo
    echo "### Hot path (µs per allocate+free pair, host wall clock, median of 5)"
    echo
    echo "$HOTPATH_TABLE"
  fi
  if [[ -n $DRIVER_TABLE ]]; then
    echo
    echo "### Driver-API backend against the CUDA runtime (µs per operation, host wall clock, medians)"
    echo
    echo "$DRIVER_TABLE"
  fi
}
echo
echo "===================== results for docs/gpu-results.md ====================="
block | tee ${OUT_DIR:+"$OUT_DIR/gpu-results-block.md"}
echo "==========================================================================="
exit $FAILED
