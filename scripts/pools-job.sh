#!/usr/bin/env bash
# The memory-pool step of the main job (issue 11), with its own report:
# 1. The cache-hit pair on the default pool of an allocator without pools, on the default pool
#    of one with tenant and graph pools routed on other streams, and routed to a tenant pool,
#    in one run of cachalot_bench (pool_hot_pair/*). Target: default_with_pools within 5 % of
#    none (CPU time, medians).
# 2. The two-tenant replay: bench/traces/tenants/two_tenant_serving.csv, a
# latency-critical inference tenant (stream 0xa0) and a batch training tenant (stream 0xb0)
# sharing a simulated device of 1.1x their combined peak (and tighter: 1.05x, 1.02x), replayed
# three ways:
#   shared     - no pools: both tenants in the default pool (today's allocator);
#   equal      - one tenant pool each, same priority, no guarantee (per-tenant figures only);
#   prioritized- critical: priority 1 and a guarantee of 9 GiB (about its peak reserved when it
#                runs alone: 11.3 GiB for 7.9 GiB requested); batch: priority 0.
# Target: zero out-of-memory for the critical tenant in the prioritized replay at 1.1x, the
# batch tenant absorbing the pressure; both tenants' figures are printed.
#
# usage: scripts/pools-job.sh [BUILD_DIR] [OUT_DIR]   (defaults: build-release, out)
# Needs cachalot_bench and cachalot-replay built in BUILD_DIR (scripts/main-job.sh builds them).
# Environment: BENCH_MIN_TIME (0.1 s), BENCH_REPETITIONS (10; repetitions randomly interleaved,
# so that the load of a shared machine affects the three cases alike).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${1:-build-release}
OUT=${2:-out}
REPLAY="$BUILD/tools/cachalot-replay"
BENCH="$BUILD/bench/cachalot_bench"
TRACE=bench/traces/tenants/two_tenant_serving.csv
[ -x "$REPLAY" ] && [ -x "$BENCH" ] || { echo "pools-job: build $BENCH and $REPLAY" >&2; exit 1; }
mkdir -p "$OUT"
"$BENCH" --benchmark_filter='^pool_hot_pair/' --benchmark_min_time="${BENCH_MIN_TIME:-0.1}" \
  --benchmark_repetitions="${BENCH_REPETITIONS:-10}" --benchmark_enable_random_interleaving=true \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$OUT/bench-pools.json" --benchmark_out_format=json >"$OUT/bench-pools.txt" 2>&1
TARGETS="$OUT/targets-pools.json"  # this job's targets, for the main job's verdict
python3 - "$OUT/bench-pools.json" "$TARGETS" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b["cpu_time"] for b in data["benchmarks"]
       if b.get("aggregate_name") == "median"}
print("Memory pools on the cache-hit path (cachalot_bench, one run, interleaved repetitions, "
      "CPU time, medians)")
ok = True
for size in ("512", "4096", "1048576"):
    base = med["pool_hot_pair/none/" + size]
    row = "  %8s B: no pools %.1f ns" % (size, base)
    for mode in ("default_with_pools", "routed"):
        t = med["pool_hot_pair/%s/%s" % (mode, size)]
        row += ", %s %.1f ns (%.3fx)" % (mode, t, t / base)
        if mode == "default_with_pools":
            ok = ok and t <= 1.05 * base
    print(row)
print("target (default pool with pools within 5 %% of no pools): %s" % ("met" if ok else "MISSED"))
json.dump([{"name": "pools: default pool cache hit", "met": ok,
            "text": "default pool with pools within 5 % of no pools"}], open(sys.argv[2], "w"))
EOF
JSONL="$OUT/replay-tenants.jsonl"
: >"$JSONL"
for factor in 1.1 1.05 1.02; do
  for setup in shared equal prioritized; do
    case $setup in
      shared) pools=() ;;
      equal) pools=(--pool 0xa0=critical --pool 0xb0=batch) ;;
      prioritized) pools=(--pool 0xa0=critical,priority:1,guarantee:9GiB --pool 0xb0=batch) ;;
    esac
    line=$("$REPLAY" --json --repeat 3 --no-baseline --capacity-factor "$factor" \
      ${pools[@]+"${pools[@]}"} "$TRACE")
    echo "{\"setup\":\"$setup\",\"factor\":$factor,\"replay\":$line}" >>"$JSONL"
  done
done
python3 - "$JSONL" "$TARGETS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
gib = lambda b: "%.2f GiB" % (b / 2**30)
print("Two-tenant replay (%s), simulated device" % rows[0]["replay"]["trace"])
print("%-7s %-12s %10s %7s   %-38s %-38s" % ("device", "setup", "capacity", "OOMs",
      "critical: OOMs, peak requested/reserved", "batch: OOMs, peak requested/reserved"))
met = True
for r in rows:
    rep = r["replay"]
    pools = {p["name"]: p for p in rep.get("pools", [])}
    def tenant(name):
        p = pools.get(name)
        return "-" if p is None else "%4d, %s / %s" % (p["ooms"], gib(p["peak_requested_bytes"]),
                                                      gib(p["peak_reserved_bytes"]))
    print("%-7s %-12s %10s %7d   %-38s %-38s" % ("%.2fx" % r["factor"], r["setup"],
          gib(rep["capacity_bytes"]), rep["ooms"], tenant("critical"), tenant("batch")))
    if r["setup"] == "prioritized" and r["factor"] == 1.1:
        met = met and pools["critical"]["ooms"] == 0
print("target (prioritized, 1.1x: zero out-of-memory for the critical tenant): %s"
      % ("met" if met else "MISSED"))
targets = json.load(open(sys.argv[2]))
targets.append({"name": "pools: critical tenant without OOM", "met": met,
                "text": "prioritized, 1.1x: zero out-of-memory for the critical tenant"})
json.dump(targets, open(sys.argv[2], "w"))
EOF
