#!/usr/bin/env bash
# The GPU kit in CI, without a GPU (called by .ci/run): builds the bundle with
# scripts/build-gpu-carry.sh, then runs scripts/gpu-check.sh on it in carried mode with the CUDA
# driver replaced by the fake one (build-gpu/fake/), and asserts that
#  1. every expected binary is in the bundle and the MANIFEST states the glibc floor;
#  2. the check exits 0, its results block has one row per step of `gpu-check.sh --list` and no
#     other, each PASS or SKIP with a reason, and the steps that run on the fake driver or the
#     simulated device (MUST_PASS below) PASS;
#  3. the cost-model config line is well formed and cachalot's config parser takes it
#     (scripts/check_cost_line.py);
#  4. with one binary taken out of the bundle the check exits non-zero and that step's row says
#     NOT BUILT.
# Environment: JOBS (default: all cores), SKIP_BUILD=1 (reuse an existing build-gpu/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/gpu-kit.sh
source scripts/gpu-kit.sh
export JOBS=${JOBS:-$(nproc)}
start=$SECONDS
fail() {
  echo "ci-gpu-kit: FAILED: $*" >&2
  exit 1
}

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  t0=$SECONDS
  scripts/build-gpu-carry.sh
  echo "ci-gpu-kit: bundle built in $((SECONDS - t0)) s"
fi

# 1. The bundle.
for t in "${GPU_KIT_TARGETS[@]}" gpu_hotpath; do
  [[ -x build-gpu/bin/$t ]] || fail "build-gpu/bin/$t is missing"
done
[[ -f build-gpu/lib/libcachalot.so && -f build-gpu/fake/libcachalot_fakecuda.so ]] ||
  fail "build-gpu/lib/libcachalot.so or build-gpu/fake/libcachalot_fakecuda.so is missing"
grep -Eq '^glibc_floor: [0-9]+\.[0-9]+$' build-gpu/MANIFEST || fail "MANIFEST states no glibc_floor"
echo "ci-gpu-kit: bundle complete; $(grep '^glibc_floor' build-gpu/MANIFEST)"

# The steps that need neither a GPU nor a framework: they run on the fake driver or the simulated
# device, so they must pass here.
MUST_PASS=(
  "ABI of libcachalot.so"
  "hooks, simulated device"
  "default allocators and adapters"
  "driver ABI: declarations vs cuda.h, loader requests, real driver"
  "driver backend: context rule (fresh process)"
  "device cost model: driver call latencies"
  "core suite (incl. conformance)"
  "C API suite"
  "example: inference_engine"
  "example: c_shim"
)

# run_check OUT_DIR: gpu-check.sh in carried mode on the fake driver; echoes its exit status.
run_check() {
  local rc=0
  OUT=$1 GPU_CHECK_MODE=carried CACHALOT_CUDA_DRIVER=$ROOT/build-gpu/fake/libcachalot_fakecuda.so \
    FAKECU_CONFIG=capacity=16GiB scripts/gpu-check.sh >"$1.console" 2>&1 || rc=$?
  echo "$rc"
}

# The result cell of step NAME in results block FILE.
result_of() {
  awk -F ' \\| ' -v name="$2" '$1 == "| " name {print $2; exit}' "$1"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 2. and 3. A full run.
t0=$SECONDS
rc=$(run_check "$work/run1")
block=$work/run1/gpu-results-block.md
[[ -f $block ]] || fail "gpu-check.sh wrote no results block (see below)$(tail -n 40 "$work/run1.console")"
echo "ci-gpu-kit: gpu-check.sh (carried, fake driver) exited $rc in $((SECONDS - t0)) s:"
sed 's/^/  /' "$block"
if [[ $rc != 0 ]]; then  # the failing tests, before the work folder goes
  grep -E '^\[  FAILED  \] [A-Za-z]|^===== ' "$work/run1.console" | sed 's/^/  /' | head -n 80
  fail "gpu-check.sh exited $rc"
fi
mapfile -t steps < <(scripts/gpu-check.sh --list)
# The step table's rows (header and rule excluded) must be exactly the steps, in order.
mapfile -t names < <(awk '/^\| step \| result/ {t = 1; next} t && /^\|---/ {next}
  t && /^\| / {sub(/^\| /, ""); sub(/ \| .*/, ""); print; next} t {exit}' "$block")
[[ ${#names[@]} == "${#steps[@]}" ]] || fail "${#names[@]} step rows for ${#steps[@]} steps"
for i in "${!steps[@]}"; do
  [[ ${names[$i]} == "${steps[$i]}" ]] || fail "row $i is '${names[$i]}', expected '${steps[$i]}'"
  r=$(result_of "$block" "${steps[$i]}")
  case $r in
    PASS) ;;
    "SKIP (no reason printed)" | "SKIP ()") fail "'${steps[$i]}' skipped without a reason" ;;
    SKIP\ \(*\)) ;;
    *) fail "'${steps[$i]}': $r" ;;
  esac
done
for s in "${MUST_PASS[@]}"; do
  [[ $(result_of "$block" "$s") == PASS ]] || fail "'$s' must PASS on the fake driver: $(result_of "$block" "$s")"
done
python3 scripts/check_cost_line.py --library build-gpu/lib/libcachalot.so "$block" ||
  fail "the cost-model config line is malformed"
echo "ci-gpu-kit: ${#names[@]} step rows checked"

# 4. One binary fewer.
removed=c_shim
mv "build-gpu/bin/$removed" "$work/$removed"
t0=$SECONDS
rc=$(run_check "$work/run2")
mv "$work/$removed" "build-gpu/bin/$removed"
r=$(result_of "$work/run2/gpu-results-block.md" "example: $removed")
echo "ci-gpu-kit: without build-gpu/bin/$removed: exit $rc, row '$r' ($((SECONDS - t0)) s)"
[[ $rc != 0 ]] || fail "gpu-check.sh exited 0 with build-gpu/bin/$removed missing"
[[ $r == "NOT BUILT ("* ]] || fail "the row of the missing binary says '$r', not NOT BUILT"

echo "ci-gpu-kit: passed in $((SECONDS - start)) s"
