#!/usr/bin/env bash
# CI: the README's "Installing" lines run exactly as written (a Release build of the library,
# the tools and the benchmarks, warnings as errors), with only the build directory moved to a scratch
# directory and `--prefix /usr/local` to a temporary prefix; then what they installed is used:
# the headers and the static library through pkg-config and find_package's files, libcachalot.so
# and the Python package through the interpreter CMake configured with. Then the README's pip
# line, as written, in a fresh venv that has nothing but pip (the package's backend builds
# libcachalot.so with CMake). Run by .ci/run; without arguments it works in a temporary
# directory it removes.
#   scripts/ci-install.sh [SCRATCH_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=${1:-}
if [[ -z $scratch ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
fi
mkdir -p "$scratch"
prefix=$scratch/prefix
say() { echo "ci-install: $*"; }
fail() { echo "ci-install: FAIL: $*" >&2; exit 1; }

# The lines of the first ```sh block after "## Installing", comments dropped.
mapfile -t lines < <(awk '/^## Installing/ {on = 1; next} /^## / {on = 0}
  on && /^```sh/ {inblock = 1; next} inblock && /^```/ {exit} inblock {print}' README.md |
  sed 's/[[:space:]]*#.*$//' | grep -v '^[[:space:]]*$')
[[ ${#lines[@]} -ge 3 ]] || fail "README.md's Installing block has ${#lines[@]} lines, not 3"
[[ ${lines[0]} == "cmake -S . -B build-release "* ]] || fail "unexpected first line: ${lines[0]}"
printf '%s\n' "${lines[@]}" | grep -q -- '--prefix /usr/local' ||
  fail "no 'cmake --install ... --prefix /usr/local' line in README.md's Installing block"
step=0
for line in "${lines[@]}"; do
  cmd=${line//build-release/$scratch/build-release}
  cmd=${cmd//--prefix \/usr\/local/--prefix $prefix}
  step=$((step + 1))
  say "README: $line"
  say "   run: $cmd"
  log=$scratch/step$step.log
  eval "$cmd" >"$log" 2>&1 || { tail -n 60 "$log"; fail "$line"; }
  if grep -i "warning" "$log"; then fail "'$line' printed the warnings above"; fi
done

# What was installed works.
for f in include/cachalot/cachalot.hpp include/cachalot/cachalot.h include/cachalot/version.h \
  bin/cachalot-replay; do
  [[ -e $prefix/$f ]] || fail "$f not installed"
done
libdir=
for d in lib lib64 lib/x86_64-linux-gnu; do [[ -e $prefix/$d/libcachalot.so ]] && libdir=$d; done
[[ -n $libdir ]] || fail "libcachalot.so not installed"
for f in libcachalot.a libcachalot.so cmake/cachalot/cachalotConfig.cmake pkgconfig/cachalot.pc; do
  [[ -e $prefix/$libdir/$f ]] || fail "$libdir/$f not installed"
done
cat >"$scratch/consumer.c" <<'EOF'
#include <cachalot/cachalot.h>
#include <stdio.h>
int main(void) {
  cachalot_allocator* a = NULL;
  void* p = NULL;
  if (cachalot_create("backend:simulated,capacity:1GiB", &a) != CACHALOT_SUCCESS) return 1;
  if (cachalot_malloc(a, &p, 1000, NULL) != CACHALOT_SUCCESS) return 1;
  if (cachalot_free(a, p, NULL) != CACHALOT_SUCCESS) return 1;
  cachalot_destroy(a);
  puts("consumer: ok");
  return 0;
}
EOF
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror "$scratch/consumer.c" -o "$scratch/consumer" \
  $(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --cflags --libs cachalot)
LD_LIBRARY_PATH=$prefix/$libdir "$scratch/consumer"
python=$(sed -n 's/^_\{0,1\}Python3_EXECUTABLE:[A-Z]*=//p' "$scratch/build-release/CMakeCache.txt" |
  head -n 1)
pydir=$(sed -n 's/^CACHALOT_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$scratch/build-release/CMakeCache.txt")
[[ -f $prefix/$pydir/cachalot/__init__.py ]] || fail "the Python package is not in $prefix/$pydir"
(cd / && env -u CACHALOT_LIBRARY PYTHONPATH="$prefix/$pydir" "$python" -c '
import cachalot, sys
assert cachalot.library_path().startswith(sys.argv[1]), cachalot.library_path()
with cachalot.Allocator("backend:simulated,capacity:1GiB") as a:
    a.malloc(1000)
print("python: cachalot from", cachalot.__file__, "with", cachalot.library_path())' "$prefix")
say "the README's Installing lines build warning-free and install a working tree"

# The README's pip line, as written, in a venv with nothing but pip (no setuptools, no wheel).
# shellcheck disable=SC2016
pipline=$(sed -n 's/.*`\(pip install [^`]*\)`.*/\1/p' README.md | head -n 1)
[[ $pipline == "pip install --no-build-isolation ./python" ]] ||
  fail "README.md's pip line is '$pipline'"
before=$(git -C "$root" status --porcelain --ignored python | grep -v __pycache__ || true)
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip uninstall -y -q setuptools wheel >/dev/null 2>&1 || true
say "README: $pipline   (in a fresh venv: $("$scratch/venv/bin/python" -m pip list 2>/dev/null |
  tail -n +3 | awk '{print $1}' | tr '\n' ' '))"
read -ra words <<<"$pipline"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$scratch/venv/bin/${words[0]}" "${words[@]:1}" \
  >"$scratch/pip.log" 2>&1 || { tail -n 40 "$scratch/pip.log"; fail "$pipline"; }
(cd / && env -u CACHALOT_LIBRARY -u PYTHONPATH "$scratch/venv/bin/python" -c '
import cachalot
with cachalot.Allocator("backend:simulated,capacity:1GiB") as a:
    a.malloc(1000)
print("pip: cachalot with", cachalot.library_path())')
after=$(git -C "$root" status --porcelain --ignored python | grep -v __pycache__ || true)
[[ $before == "$after" ]] || fail "the pip build left files in the checkout: $after"
say "the README's pip line works in a venv with only pip"
