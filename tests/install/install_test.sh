#!/usr/bin/env bash
# Installs the built project into a temporary prefix, then checks what a user of the install
# relies on: find_package(cachalot VERSION) with the documented compatibility (same minor
# version before 1.0), a consumer project using both exported targets, the version macros, the
# soname policy, and the pkg-config file (a C program built with pkg-config's flags only).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR VERSION
set -euo pipefail
build_dir=$1
src_dir=$2
version=$3
IFS=. read -r major minor _ <<<"$version"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null

# find_package with a version: this one, and not the next minor (before 1.0) or major.
cmake -S "$src_dir/tests/install/consumer" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCACHALOT_WANT="$version" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
libdir=$(dirname "$(find "$work/prefix" -name 'libcachalot.so' | head -n 1)")
LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$work/build/consumer_c"
if [[ $major == 0 ]]; then incompatible="0.$((minor + 1))"; else incompatible="$((major + 1)).0"; fi
if cmake -S "$src_dir/tests/install/consumer" -B "$work/build-bad" -G Ninja \
     -DCMAKE_PREFIX_PATH="$work/prefix" -DCACHALOT_WANT="$incompatible" >/dev/null 2>&1; then
  echo "find_package(cachalot $incompatible) accepted version $version" >&2
  exit 1
fi

# The soname follows the same policy.
soname=$(readelf -d "$libdir/libcachalot.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [[ $major == 0 ]]; then want="libcachalot.so.$major.$minor"; else want="libcachalot.so.$major"; fi
if [[ $soname != "$want" ]]; then
  echo "soname is '$soname', the policy says '$want'" >&2
  exit 1
fi

# pkg-config: a C program built from cachalot.pc's flags alone.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[[ $(pkg-config --modversion cachalot) == "$version" ]] ||
  { echo "pkg-config --modversion: $(pkg-config --modversion cachalot), want $version" >&2; exit 1; }
# shellcheck disable=SC2046
cc -std=c99 -o "$work/consumer_pc" "$src_dir/tests/install/consumer/main.c" \
  $(pkg-config --cflags --libs cachalot)
LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$work/consumer_pc"
echo "install: find_package $version (not $incompatible), both targets, soname $soname, pkg-config: ok"
