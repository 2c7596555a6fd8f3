#!/usr/bin/env bash
# Configures tests/subproject (cachalot under add_subdirectory) with no build type and with
# Debug, fmt and GoogleTest made unfindable, CUDA off (the library part does not change with it;
# the test is kept short); the first is also built, run and installed (the parent's install
# installs nothing of cachalot unless CACHALOT_INSTALL=ON).
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
  # The parent's install installs the parent only; with CACHALOT_INSTALL=ON, cachalot too.
  cmake --install "$dir" --prefix "$work/prefix-default" >/dev/null
  [ -x "$work/prefix-default/bin/parent" ] || { echo "FAIL: the parent was not installed"; exit 1; }
  if find "$work/prefix-default" -iname '*cachalot*' | grep .; then
    echo "FAIL: a subproject's cachalot installed the files above (CACHALOT_INSTALL is OFF)"
    exit 1
  fi
  cmake -S "$src_dir/tests/subproject" -B "$dir" -DCACHALOT_INSTALL=ON >/dev/null
  cmake --build "$dir" -j "${JOBS:-2}" --target parent parent_c >/dev/null
  cmake --install "$dir" --prefix "$work/prefix-on" >/dev/null
  for f in include/cachalot/cachalot.hpp include/cachalot/version.h; do
    [ -f "$work/prefix-on/$f" ] || { echo "FAIL: CACHALOT_INSTALL=ON did not install $f"; exit 1; }
  done
  for f in 'lib*/libcachalot.a' 'lib*/libcachalot.so' 'lib*/cmake/cachalot/cachalotConfig.cmake'; do
    # shellcheck disable=SC2086
    ls $work/prefix-on/$f >/dev/null 2>&1 ||
      { echo "FAIL: CACHALOT_INSTALL=ON did not install $f"; exit 1; }
  done
  echo "subproject: installs nothing of cachalot by default, all of it with CACHALOT_INSTALL=ON"
done
