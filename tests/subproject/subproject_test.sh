#!/usr/bin/env bash
# Configures tests/subproject (cachalot under add_subdirectory) with no build type and with
# Debug, fmt and GoogleTest made unfindable, CUDA off (the library part does not change with it;
# the test is kept short); the first is also built and run.
# Usage: subproject_test.sh SOURCE_DIR
set -euo pipefail
src_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
for type in "" Debug; do
  dir="$work/build-${type:-none}"
  cmake -S "$src_dir/tests/subproject" -B "$dir" "${gen[@]}" -DCACHALOT_SOURCE_DIR="$src_dir" \
    -DCMAKE_BUILD_TYPE="$type" -DEXPECT_BUILD_TYPE="$type" -DCACHALOT_CUDA=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON >/dev/null
  echo "subproject, build type '${type:-none}': configured"
  [[ -n $type ]] && continue
  cmake --build "$dir" -j "${JOBS:-2}" --target parent parent_c >/dev/null
  "$dir/parent"
  LD_LIBRARY_PATH="$dir/cachalot/src:${LD_LIBRARY_PATH:-}" "$dir/parent_c"
  echo "subproject, build type '${type:-none}': built and ran"
done
