#!/usr/bin/env bash
# Builds, on a machine without a GPU, the folder `build-gpu/` that scripts/gpu-check.sh runs
# on a GPU machine (which has nvcc, cmake, ninja and python, but maybe not GoogleTest or fmt).
#   build-gpu/bin/   the GPU test binaries, the driver-backend checks (cachalot_gpu_driver_check,
#                    cachalot_driver_abi_test), the examples and tools/gpu_hotpath (sm_90),
#                    linked with a static libstdc++/libgcc so they run on any recent glibc;
#   build-gpu/lib/   libcachalot.so (and a copy named by its SONAME, which the test binaries need);
#                    it links nothing CUDA and loads the driver (libcuda.so.1) at run time;
#   build-gpu/deps/  fmt headers with a minimal fmt-config.cmake and the GoogleTest sources,
#                    so that gpu-check.sh can rebuild everything with the GPU machine's own
#                    toolkit when the carried binaries' CUDA runtime is newer than its driver;
#   build-gpu/MANIFEST  commit, date and toolkit of the build.
# The CMake tree itself stays in build-gpu-tree/ (absolute paths: not relocatable).
# Usage: scripts/build-gpu-carry.sh   (JOBS=N to change the -j2 default)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=${CACHALOT_CARRY_TREE:-$ROOT/build-gpu-tree}
BUNDLE=$ROOT/build-gpu
JOBS=${JOBS:-2}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
STATIC_RT="-static-libstdc++ -static-libgcc"

cmake -S "$ROOT" -B "$TREE" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCACHALOT_CUDA=ON \
  -DCACHALOT_BUILD_BENCHMARKS=OFF -DCACHALOT_BUILD_EXAMPLES=ON -DCACHALOT_BUILD_TESTS=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_EXE_LINKER_FLAGS="$STATIC_RT" -DCMAKE_SHARED_LINKER_FLAGS="$STATIC_RT"

targets=(cachalot_shared cachalot_exports_test cachalot_hooks_test cachalot_default_adapters_test
         cachalot_cuda_backend_test cachalot_driver_abi_test cachalot_gpu_driver_check
         inference_engine c_shim)
for optional in core_tests c_api_tests; do
  # grep reads everything (not -q): an early exit would SIGPIPE ninja and, with pipefail, drop
  # the target at random.
  if ninja -C "$TREE" -t targets all | grep "^${optional}:" >/dev/null; then targets+=("$optional"); fi
done
ninja -C "$TREE" -j"$JOBS" "${targets[@]}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/deps/fmt/include"
cp -L "$TREE/src/libcachalot.so" "$BUNDLE/lib/libcachalot.so"
soname=$(readelf -d "$TREE/src/libcachalot.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
cp -L "$TREE/src/libcachalot.so" "$BUNDLE/lib/${soname:-libcachalot.so.0}"
for t in "${targets[@]}"; do
  [[ $t == cachalot_shared ]] && continue
  f=$(find "$TREE" -type f -name "$t" -perm -u+x | head -n 1)
  [[ -n $f ]] && cp "$f" "$BUNDLE/bin/"
done
"$NVCC" -O2 -std=c++17 -arch=sm_90 -I"$ROOT/include" "$ROOT/tools/gpu_hotpath.cu" \
  -o "$BUNDLE/bin/gpu_hotpath" -ldl -Xcompiler -static-libstdc++ -Xcompiler -static-libgcc
strip --strip-debug "$BUNDLE"/bin/* "$BUNDLE"/lib/*

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

{
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nvcc: $("$NVCC" --version | tail -n 1)"
  echo "compiler: $(c++ --version | head -n 1)"
} > "$BUNDLE/MANIFEST"

du -sh "$BUNDLE"
echo "build-gpu/ ready: carry it and run scripts/gpu-check.sh on the GPU machine"
