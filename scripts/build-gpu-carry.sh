#!/usr/bin/env bash
# Builds, on a machine without a GPU, the folder `build-gpu/` that scripts/gpu-check.sh runs
# on a GPU machine (which has nvcc, cmake, ninja and python, but maybe not GoogleTest or fmt).
#   build-gpu/bin/   every executable the check runs (GPU_KIT_TARGETS in scripts/gpu-kit.sh: the
#                    GPU and simulated-device test binaries, the driver-backend checks, the
#                    device cost measurement, the examples, cachalot_bench with the GPU
#                    baselines) and tools/gpu_hotpath, all for sm_90, linked with a static
#                    libstdc++/libgcc;
#   build-gpu/lib/   libcachalot.so (and a copy named by its SONAME, which the test binaries
#                    need), which links nothing CUDA and loads the driver (libcuda.so.1) at run
#                    time, and the Google Benchmark library cachalot_bench links;
#   build-gpu/fake/  the fake CUDA driver (driver_abi_test checks the loader's requests on it;
#                    CI runs the whole check on it);
#   build-gpu/deps/  fmt headers with a minimal fmt-config.cmake, the GoogleTest sources, and Google
#                    Benchmark's headers and library with a minimal config, so that gpu-check.sh
#                    can rebuild everything with the GPU machine's own toolkit when the carried
#                    binaries cannot run there;
#   build-gpu/MANIFEST  commit, date, toolkit and compiler of the build, and what the carried
#                    binaries need of the machine: `glibc_floor` and `glibcxx_floor`, the highest
#                    GLIBC_ and GLIBCXX_ symbol versions any carried file asks for (objdump -T),
#                    with the files and symbols that set them. gpu-check.sh compares them with
#                    the GPU machine's before it chooses the carried binaries or a rebuild.
# The build has warnings not fatal (-DCACHALOT_WERROR=OFF): a compiler's false positive must not
# cost the bundle; CI builds with warnings as errors anyway. The CMake tree itself stays in
# build-gpu-tree/ (absolute paths: not relocatable).
# Usage: scripts/build-gpu-carry.sh   (JOBS=N to change the -j2 default). Exit 1, saying which,
# when a kit target could not be built.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/gpu-kit.sh
source "$ROOT/scripts/gpu-kit.sh"
TREE=${CACHALOT_CARRY_TREE:-$ROOT/build-gpu-tree}
BUNDLE=$ROOT/build-gpu
JOBS=${JOBS:-2}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
STATIC_RT="-static-libstdc++ -static-libgcc"

cmake -S "$ROOT" -B "$TREE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCACHALOT_CUDA=ON \
  -DCACHALOT_BUILD_BENCHMARKS=ON -DCACHALOT_BUILD_EXAMPLES=ON -DCACHALOT_BUILD_TESTS=ON \
  -DCACHALOT_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_EXE_LINKER_FLAGS="$STATIC_RT" -DCMAKE_SHARED_LINKER_FLAGS="$STATIC_RT"

# Every kit target must exist (GoogleTest, Google Benchmark and nvcc found), and builds as far as
# it can (-k 0) so that one failure does not hide the others.
defined=$(ninja -C "$TREE" -t targets all | sed 's/:.*//')
absent=()
for t in "${GPU_KIT_TARGETS[@]}" "${GPU_KIT_LIBRARIES[@]}"; do
  grep -qx "$t" <<<"$defined" || absent+=("$t")
done
if ((${#absent[@]})); then
  echo "build-gpu-carry: the configuration defines no ${absent[*]} (GoogleTest, Google Benchmark" \
    "or the CUDA toolkit missing? see the cmake output above)" >&2
  exit 1
fi
if ! ninja -C "$TREE" -k 0 -j"$JOBS" "${GPU_KIT_TARGETS[@]}" "${GPU_KIT_LIBRARIES[@]}"; then
  failed=()
  for t in "${GPU_KIT_TARGETS[@]}" "${GPU_KIT_LIBRARIES[@]}"; do  # up to date, or it failed
    ninja -C "$TREE" -n "$t" | grep 'no work to do' >/dev/null || failed+=("$t")
  done
  echo "build-gpu-carry: not built: ${failed[*]} (see the errors above)" >&2
  exit 1
fi

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/fake" "$BUNDLE/deps/fmt/include"
cp -L "$TREE/src/libcachalot.so" "$BUNDLE/lib/libcachalot.so"
soname=$(readelf -d "$TREE/src/libcachalot.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
cp -L "$TREE/src/libcachalot.so" "$BUNDLE/lib/${soname:-libcachalot.so.0}"
cp -L "$TREE/tests/cuda/libcachalot_fakecuda.so" "$BUNDLE/fake/"
for t in "${GPU_KIT_TARGETS[@]}"; do
  cp "$(find "$TREE" -type f -name "$t" -perm -u+x | head -n 1)" "$BUNDLE/bin/"
done
"$NVCC" -O2 -std=c++17 -arch=sm_90 -I"$ROOT/include" "$ROOT/tools/gpu_hotpath.cu" \
  -o "$BUNDLE/bin/gpu_hotpath" -ldl -Xcompiler -static-libstdc++ -Xcompiler -static-libgcc
# The shared libraries the executables need beyond the system's (Google Benchmark).
for lib in $(ldd "$BUNDLE"/bin/* 2>/dev/null | awk '/libbenchmark/ {print $3}' | sort -u); do
  cp -L "$lib" "$BUNDLE/lib/"
done
strip --strip-debug "$BUNDLE"/bin/* "$BUNDLE"/lib/* "$BUNDLE"/fake/*

# Dependencies for a rebuild on the GPU machine.
FMT_INCLUDE=${FMT_INCLUDE:-/usr/include/fmt}
cp -r "$FMT_INCLUDE" "$BUNDLE/deps/fmt/include/"
cat > "$BUNDLE/deps/fmt/fmt-config.cmake" <<'CMAKE'
# Minimal stand-in for fmt's package config: the header-only target cachalot uses.
set(fmt_VERSION 9.1.0)
if(NOT TARGET fmt::fmt-header-only)
  add_library(fmt::fmt-header-only INTERFACE IMPORTED)
  set_target_properties(fmt::fmt-header-only PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/include"
    INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
endif()
CMAKE
GTEST_SRC=${GTEST_SRC:-/usr/src/googletest}
if [[ -d $GTEST_SRC ]]; then
  cp -r "$GTEST_SRC" "$BUNDLE/deps/googletest-src"
  rm -rf "$BUNDLE/deps/googletest-src/.git"
fi
BENCHMARK_INCLUDE=${BENCHMARK_INCLUDE:-/usr/include/benchmark}
bench_lib=$(find "$BUNDLE/lib" -name 'libbenchmark.so*' | head -n 1)
if [[ -d $BENCHMARK_INCLUDE && -n $bench_lib ]]; then
  mkdir -p "$BUNDLE/deps/benchmark/include"
  cp -r "$BENCHMARK_INCLUDE" "$BUNDLE/deps/benchmark/include/"
  cat > "$BUNDLE/deps/benchmark/benchmarkConfig.cmake" <<CMAKE
# Minimal stand-in for Google Benchmark's package config: the carried shared library.
if(NOT TARGET benchmark::benchmark)
  add_library(benchmark::benchmark SHARED IMPORTED)
  set_target_properties(benchmark::benchmark PROPERTIES
    IMPORTED_LOCATION "\${CMAKE_CURRENT_LIST_DIR}/../../lib/$(basename "$bench_lib")"
    INTERFACE_INCLUDE_DIRECTORIES "\${CMAKE_CURRENT_LIST_DIR}/include")
endif()
CMAKE
fi

carried=("$BUNDLE"/bin/* "$BUNDLE"/lib/* "$BUNDLE"/fake/*)
glibc_floor=$(gpu_kit_needs GLIBC "${carried[@]}")
glibcxx_floor=$(gpu_kit_needs GLIBCXX "${carried[@]}")
{
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nvcc: $("$NVCC" --version | tail -n 1)"
  echo "compiler: $(c++ --version | head -n 1)"
  echo "build glibc: $(gpu_kit_machine_glibc)"
  echo "glibc_floor: ${glibc_floor:-none}"
  echo "glibc_floor_set_by: $(gpu_kit_needers GLIBC "$glibc_floor" "${carried[@]}")"
  echo "glibcxx_floor: ${glibcxx_floor:-none}"
  [[ -n $glibcxx_floor ]] &&
    echo "glibcxx_floor_set_by: $(gpu_kit_needers GLIBCXX "$glibcxx_floor" "${carried[@]}")"
  echo "targets: ${GPU_KIT_TARGETS[*]} gpu_hotpath"
} > "$BUNDLE/MANIFEST"

du -sh "$BUNDLE"
sed -n '/^glibc_floor:/p;/^glibcxx_floor:/p' "$BUNDLE/MANIFEST"
echo "build-gpu/ ready: carry it and run scripts/gpu-check.sh on the GPU machine"
