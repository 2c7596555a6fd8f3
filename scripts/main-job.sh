#!/usr/bin/env bash
# cachalot's main job: build Release, run a fast subset of the benchmarks (cachalot and its
# baselines in one binary) and replay the bundled traces (with the smallest capacity each needs;
# fixed and expandable segments, each beside the pass-through), then print ONE report: every
# figure with its ratio to the baselines, the replays with their device calls, syncs and modeled
# device time next to the bytes, and the targets met or missed. Plots (SVG) go to out/plots/, the
# targets as JSON to out/targets.json; the last line is the verdict ("targets: N met, M missed:
# ..."; the job exits 0 even when a target is missed). Runs on the GPU when there is one, else on
# the simulated device, and says so. Afterwards `cmake --install build-release` installs it.
#
# Environment: BUILD_DIR (build-release), OUT_DIR (out), JOBS (nproc), BENCH_MIN_TIME (0.25 s),
# BENCH_REPETITIONS (3), BENCH_FILTER (a regex; FULL=1 runs every benchmark).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD_DIR:-build-release}
OUT=${OUT_DIR:-out}
JOBS=${JOBS:-$(nproc)}
MIN_TIME=${BENCH_MIN_TIME:-0.25}
REPS=${BENCH_REPETITIONS:-3}
FILTER=${BENCH_FILTER:-'^(hot_pair|many_holes|no_holes|threads_own_stream|threads_one_stream|stream_same|stream_record|stream_free_other|release_sweep|gc_sweep|growth_sweep|peak_sweep)/|^random/[^/]+/n:10000/'}
[ "${FULL:-0}" = 1 ] && FILTER='.'

say() { echo "main-job: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

build() {
  local gen=()
  have ninja && gen=(-G Ninja)
  mkdir -p "$OUT"
  say "building Release in $BUILD (log: $OUT/build.log)"
  # Everything the configuration has (the library, both its forms, the benchmarks and the
  # tools), so that `cmake --install $BUILD` works afterwards.
  if ! { cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCACHALOT_BUILD_TESTS=OFF \
           -DCACHALOT_BUILD_EXAMPLES=OFF -DCACHALOT_BUILD_BENCHMARKS=ON &&
         cmake --build "$BUILD" -j "$JOBS"; } >"$OUT/build.log" 2>&1; then
    tail -n 40 "$OUT/build.log" >&2
    say "build failed"
    exit 1
  fi
}

run_benchmarks() {
  say "running benchmarks (min time ${MIN_TIME}s, ${REPS} repetitions; log: $OUT/bench.txt)"
  "$BUILD/bench/cachalot_bench" --benchmark_filter="$FILTER" --benchmark_min_time="$MIN_TIME" \
    --benchmark_repetitions="$REPS" --benchmark_display_aggregates_only=true \
    --benchmark_out="$OUT/bench.json" --benchmark_out_format=json >"$OUT/bench.txt" 2>&1
}

replay_traces() {
  local replay="$BUILD/tools/cachalot-replay" traces=(bench/traces/*.csv)
  mkdir -p "$OUT/plots"
  say "replaying ${#traces[@]} bundled traces"
  "$replay" --json --repeat 5 --capacity-factor 1.2 --min-capacity --plot "$OUT/plots/trace.svg" \
    "${traces[@]}" >"$OUT/replay-1.2x.jsonl"
  "$replay" --json --repeat 5 --capacity-factor 1.2 --min-capacity --config expandable_segments:1 \
    "${traces[@]}" >"$OUT/replay-1.2x-expandable.jsonl"
  "$replay" --json --repeat 5 --capacity-factor 2 "${traces[@]}" >"$OUT/replay-2x.jsonl"
  "$replay" --json --repeat 5 --capacity-factor 2 --config expandable_segments:1 \
    "${traces[@]}" >"$OUT/replay-2x-expandable.jsonl"
  say "tuning the config on each trace (cachalot-replay --tune, capacity 1.2x)"
  : >"$OUT/tune-1.2x.jsonl"
  for t in "${traces[@]}"; do
    "$replay" --tune --json --repeat 1 --capacity-factor 1.2 "$t" >>"$OUT/tune-1.2x.jsonl"
  done
  say "release policy targets (scripts/policy_targets.py: before/after, 1.00x-2x scan)"
  python3 scripts/policy_targets.py --replay "$replay" --bench "$OUT/bench.json" --scan \
    --jobs "$JOBS" --json "$OUT/policy-targets.json" >"$OUT/policy-targets.txt"
  if [ "$GPU" = 1 ]; then
    "$replay" --json --repeat 5 --config backend:cuda "${traces[@]}" >"$OUT/replay-gpu.jsonl"
  fi
}

main() {
  local start=$SECONDS
  scripts/setup-deps.sh
  build
  run_benchmarks
  GPU=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["context"].get("cachalot_backend") == "cuda"))' "$OUT/bench.json")
  replay_traces
  local device="simulated device (no CUDA device here)" replays=()
  [ "$GPU" = 1 ] && device="CUDA GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
  replays=(--replay "simulated device, capacity 1.2x each trace's peak (targets)=$OUT/replay-1.2x.jsonl"
           --replay "simulated device, capacity 2x each trace's peak=$OUT/replay-2x.jsonl"
           --replay "simulated device, capacity 2x, expandable_segments:1=$OUT/replay-2x-expandable.jsonl")
  [ "$GPU" = 1 ] && replays+=(--replay "CUDA device=$OUT/replay-gpu.jsonl")
  python3 scripts/bench_report.py --bench "$OUT/bench.json" "${replays[@]}" \
    --target-replay "simulated device, capacity 1.2x each trace's peak (targets)" \
    --expandable "$OUT/replay-1.2x-expandable.jsonl" \
    --plots "$OUT/plots/ (requested, allocated and reserved bytes over each replay)" \
    --tune "$OUT/tune-1.2x.jsonl" --policy "$OUT/policy-targets.json" \
    --targets-json "$OUT/targets.json" --markdown "$OUT/tables.md" \
    --device "$device" | tee "$OUT/report.txt"
  say "memory pools: cache-hit cost and the two-tenant replay (scripts/pools-job.sh)"
  scripts/pools-job.sh "$BUILD" "$OUT" | tee "$OUT/report-pools.txt"
  say "done in $((SECONDS - start)) s; report in $OUT/report.txt, plots in $OUT/plots/, targets" \
    "in $OUT/targets.json"
  # The last line: every target of both reports, met or missed (the job exits 0 either way).
  python3 scripts/bench_report.py --merge-targets "$OUT/targets.json" "$OUT/targets.json" \
    "$OUT/targets-pools.json"
}

main "$@"
