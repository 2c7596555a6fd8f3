#!/usr/bin/env python3
"""Issue 21's targets for the release policy, checked on every bundled trace (the traces
scripts/gen_traces.py makes), with fixed and with expandable segments, and printed met/missed.

Settings compared, all on one cachalot-replay binary and the simulated device with its cost
model (same run, same machine):
  after      the defaults (release_policy:adaptive)
  before     --before-binary (a build of dcc40fd, main before the policy) with its defaults;
             without it, release_policy:eager on this build, which makes the decisions of the
             engine before the policy (its modeled device time fills the before rows, where
             eager makes the calls the build before made: that build has no cost model)
  reference  caching and no release: gc_threshold:0,max_split_size:none
(each also with expandable_segments:1).

Targets (per trace and segment kind; the capacity is a multiple of the trace's peak):
  calls     at 1.2x and 2x: device calls <= 1.25x the reference's where it has no OOM
  syncs     at 1.2x and 2x: no synchronization outside an out-of-memory retry, empty_cache or
            trim (gc_syncs: those a release before a growth made)
  time      at 1.2x and 2x: modeled device time <= 1 % of the trace's span
  time+     at 1.2x and 2x: modeled device time above the reference's <= 1 % of the span (what
            the policy adds to caching's floor: reserving a trace's peak once already costs
            more than 1 % of these spans of a few hundred ms, for any allocator)
  maps      expandable, at 1.2x and 2x: chunk maps <= 2x the chunks of peak reserved
  capacity  the smallest capacity with no OOM no larger than before's
  monotone  no more OOMs with more capacity, 1.00x to 2.00x in 1 % steps (--scan)
  host      ns/op <= 60 on the single-stream training traces (cnn_training, llm_training,
            cnn_workspace_spike), defaults, 1.2x
  host-5%   with --before-binary: ns/op at most 5 % above the build before's, every trace, 1.2x
With --bench FILE (cachalot_bench JSON): random n=10k at 64 and 256 MiB <= 100 ns per
operation, and the sweeps (release_sweep, growth_sweep, peak_sweep) flat: slowest / fastest
<= 1.5.

Usage: scripts/policy_targets.py [--replay PATH] [--before-binary PATH] [--traces DIR]
           [--bench FILE.json] [--scan] [--json OUT.json] [--jobs N] [--repeat N]
Exit status 0 (the report says what is missed). Python 3 standard library only.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import subprocess
import sys

REFERENCE = "gc_threshold:0,max_split_size:none"
BEFORE = "release_policy:eager"
FACTORS = (1.2, 2.0)
SINGLE_STREAM_TRAINING = ("cnn_training", "llm_training", "cnn_workspace_spike")
CHUNK = 2 << 20


def kind_config(kind, base):
    extra = "expandable_segments:1" if kind == "expandable" else ""
    return ",".join(x for x in (base, extra) if x)


def replay(binary, trace, config, factor, repeat=1, min_capacity=False):
    cmd = [binary, "--json", "--no-baseline", "--one-thread", "--repeat", str(repeat),
           "--capacity-factor", "%.2f" % factor]
    if config:
        cmd += ["--config", config]
    if min_capacity:
        cmd.append("--min-capacity")
    out = subprocess.run(cmd + [trace], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def calls(r):
    d = r.get("device")
    if d:
        return d["calls"]
    return r["segment_allocs"] + r["segment_frees"] + r["chunk_maps"] + r["chunk_unmaps"]


def syncs(r):
    d = r.get("device")
    return d["syncs"] if d else r["device_syncs"]


def collect(args, traces):
    """{trace: {kind: {...}}} of every replay the targets need."""
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for t in traces:
            for kind in ("fixed", "expandable"):
                for name, base in (("after", ""), ("before", BEFORE), ("reference", REFERENCE)):
                    cfg = kind_config(kind, base)
                    for f in FACTORS:
                        rep = args.repeat if name != "reference" else 1
                        jobs[(t, kind, name, f)] = pool.submit(replay, args.replay, t, cfg, f, rep,
                                                               name != "reference" and f == 1.2)
                if args.before_binary:
                    for f in FACTORS:
                        jobs[(t, kind, "dcc40fd", f)] = pool.submit(
                            replay, args.before_binary, t, kind_config(kind, ""), f, args.repeat,
                            f == 1.2)
                if args.scan:
                    for pct in range(100, 201):
                        jobs[(t, kind, "scan", pct)] = pool.submit(
                            replay, args.replay, t, kind_config(kind, ""), pct / 100.0)
        data = {}
        for (t, kind, name, f), job in jobs.items():
            data.setdefault(t, {}).setdefault(kind, {}).setdefault(name, {})[f] = job.result()
    return data


def min_cap(r):
    m = r.get("min_capacity") or {}
    return m.get("factor") if m.get("found") else None


def verdict(ok):
    return "met" if ok else "MISSED"


def check_trace(name, kinds):
    """Target rows [(target, kind, ok, detail)] and table rows for one trace."""
    rows = []
    for kind, sets in kinds.items():
        for f in FACTORS:
            a, ref = sets["after"][f], sets["reference"][f]
            if ref["ooms"] == 0:
                ok = calls(a) <= 1.25 * calls(ref)
                rows.append(("calls", kind, f, ok, "%d vs 1.25 x %d" % (calls(a), calls(ref))))
            else:
                rows.append(("calls", kind, f, None, "reference has %d OOM" % ref["ooms"]))
            gc = a.get("gc_syncs", 0)
            rows.append(("syncs", kind, f, gc == 0, "%d outside a retry" % gc))
            share = a.get("device_span_share")
            if share is not None:
                rows.append(("time", kind, f, share <= 0.01,
                             "%.2f ms, %.2f %% of the span" % (a["device_ms"], 100 * share)))
            span_ms = a.get("trace_span_us", 0) / 1e3
            if share is not None and span_ms > 0 and ref.get("device_ms") is not None:
                extra = a["device_ms"] - ref["device_ms"]
                rows.append(("time+", kind, f, extra <= 0.01 * span_ms,
                             "%.2f ms above the reference's %.2f ms (%.2f %% of the span; the "
                             "reference alone: %.2f %%)" % (extra, ref["device_ms"],
                                                             100 * extra / span_ms,
                                                             100 * ref["device_ms"] / span_ms)))
            if kind == "expandable":
                held = a["peak_reserved_bytes"] // CHUNK
                rows.append(("maps", kind, f, a["chunk_maps"] <= 2 * held,
                             "%d maps, %d chunks at the peak" % (a["chunk_maps"], held)))
        before_set = sets.get("dcc40fd", sets["before"])
        after, before = min_cap(sets["after"][1.2]), min_cap(before_set[1.2])
        ok = after is not None and (before is None or after <= before + 1e-9)
        rows.append(("capacity", kind, None, ok, "%s vs %s before" % (after, before)))
        if "scan" in sets:
            pcts = sorted(sets["scan"])
            ooms = [sets["scan"][p]["ooms"] for p in pcts]
            worse = [p for x, y, p in zip(ooms, ooms[1:], pcts[1:]) if y > x]
            rows.append(("monotone", kind, None, not worse,
                         "more OOMs at %s" % worse if worse else "no step adds an OOM"))
        if "dcc40fd" in sets:
            ns, ns0 = sets["after"][1.2]["ns_per_op"], sets["dcc40fd"][1.2]["ns_per_op"]
            rows.append(("host-5%", kind, 1.2, ns <= 1.05 * ns0,
                         "%.0f vs %.0f ns/op before" % (ns, ns0)))
        if kind == "fixed" and name in SINGLE_STREAM_TRAINING:
            ns = sets["after"][1.2]["ns_per_op"]
            rows.append(("host", kind, 1.2, ns <= 60, "%.0f ns/op" % ns))
    return rows


def segment_calls(r):
    """Segment allocations and frees plus chunk maps and unmaps: the device calls both binaries
    count (the cost model's total also counts events, range reservations and chunk handles)."""
    return r["segment_allocs"] + r["segment_frees"] + r["chunk_maps"] + r["chunk_unmaps"]


def table_rows(name, kinds):
    """Before: the --before-binary build (dcc40fd) where given, its modeled device time from
    release_policy:eager on this build when eager makes the same calls (the binary before has
    no cost model); else eager throughout. After: the defaults."""
    out = []
    for kind, sets in kinds.items():
        for label in ("before", "after"):
            src = sets["dcc40fd"] if label == "before" and "dcc40fd" in sets else sets[label]
            r12, r2 = src[1.2], src[2.0]
            ms = [r12.get("device_ms"), r2.get("device_ms")]
            if src is not sets[label]:  # (the binary before: modeled time from eager)
                e = sets["before"]
                ms = [e[f].get("device_ms") if segment_calls(e[f]) == segment_calls(src[f])
                      else None for f in FACTORS]
            out.append({
                "trace": name, "kind": kind,
                "setting": "before (dcc40fd)" if src is not sets[label] else label,
                "peak_reserved_gib": [r12["peak_reserved_bytes"] / 2**30,
                                      r2["peak_reserved_bytes"] / 2**30],
                "min_capacity": min_cap(r12),
                "calls": [segment_calls(r12), segment_calls(r2)],
                "syncs": [r12["device_syncs"], r2["device_syncs"]],
                "device_ms": ms,
                "ooms": [r12["ooms"], r2["ooms"]], "ns_per_op": r12["ns_per_op"],
            })
    return out


def fmt_table(rows):
    head = ("trace", "segments", "setting", "peak reserved GiB 1.2x/2x", "smallest cap",
            "segment calls 1.2x/2x", "syncs 1.2x/2x", "device ms 1.2x/2x", "OOM", "ns/op")
    lines = [" | ".join(head)]
    for r in rows:
        ms = "/".join("n/a" if x is None else "%.1f" % x for x in r["device_ms"])
        lines.append(" | ".join([
            r["trace"], r["kind"], r["setting"],
            "%.2f / %.2f" % tuple(r["peak_reserved_gib"]),
            "%.4fx" % r["min_capacity"] if r["min_capacity"] else "none",
            "%d / %d" % tuple(r["calls"]), "%d / %d" % tuple(r["syncs"]), ms,
            "%d / %d" % tuple(r["ooms"]), "%.0f" % r["ns_per_op"]]))
    return lines


def bench_targets(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    by = {}
    for b in runs:
        if b.get("aggregate_name", "median") != "median":
            continue
        name = b.get("run_name", b["name"])
        ns = b["real_time"] if b.get("time_unit") == "ns" else b["real_time"] * (
            1e3 if b.get("time_unit") == "us" else 1e6 if b.get("time_unit") == "ms" else 1)
        if "items_per_second" in b and b["items_per_second"] > 0:
            ns = 1e9 / b["items_per_second"] * (b.get("threads", 1) or 1)
        by[name] = ns
    rows = []
    for mib in (64, 256):
        key = "random/cachalot/n:10000/max_mib:%d" % mib
        if key in by:
            rows.append(("random", "bench", mib, by[key] <= 100, "%.0f ns/op" % by[key]))
    for family in ("release_sweep/cachalot/segments", "gc_sweep/cachalot/segments",
                   "growth_sweep/cachalot/streams", "peak_sweep/cachalot/streams",
                   "growth_sweep/cachalot_lanes_off/streams",
                   "peak_sweep/cachalot_lanes_off/streams"):
        pts = sorted((int(k.rsplit(":", 1)[1]), v) for k, v in by.items()
                     if k.startswith(family + ":"))
        if pts:
            lo, hi = min(v for _, v in pts), max(v for _, v in pts)
            rows.append(("flat", "/".join(family.split("/")[:2]), None, hi <= 1.5 * lo,
                         ", ".join("%d: %.0f ns" % p for p in pts)))
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", default=os.path.join(here, "..", "build-release", "tools",
                                                     "cachalot-replay"))
    ap.add_argument("--before-binary", help="cachalot-replay built from dcc40fd (the before rows)")
    ap.add_argument("--traces", default=os.path.join(here, "..", "bench", "traces"))
    ap.add_argument("--bench", help="cachalot_bench JSON for the host-time targets")
    ap.add_argument("--scan", action="store_true", help="the 1.00x-2.00x monotonicity scan")
    ap.add_argument("--json", help="write the table and the targets as JSON here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeat", type=int, default=3, help="replays per timed setting")
    args = ap.parse_args()
    traces = sorted(glob.glob(os.path.join(args.traces, "*.csv")))
    data = collect(args, traces)
    table, targets = [], []
    for t in traces:
        name = os.path.basename(t)[:-4]
        table += table_rows(name, data[t])
        targets += [(name,) + row for row in check_trace(name, data[t])]
    if args.bench:
        targets += [("bench",) + row for row in bench_targets(args.bench)]
    lines = ["Release policy (issue 21): defaults before (dcc40fd, or release_policy:eager) "
             "and after, fixed and expandable segments; capacity 1.2x and 2x each trace's peak"]
    lines += fmt_table(table)
    lines += ["", "Targets (issue 21):"]
    summary = {}
    for name, target, kind, f, ok, detail in targets:
        where = "%s %s%s" % (name, kind, " %.1fx" % f if f else "")
        state = "n/a" if ok is None else verdict(ok)
        lines.append("  %-9s %-34s %-7s %s" % (target, where, state, detail))
        s = summary.setdefault(target, [0, 0])
        if ok is not None:
            s[0 if ok else 1] += 1
    lines += ["", "Summary: " + "; ".join("%s %d met, %d missed" % (k, v[0], v[1])
                                          for k, v in summary.items())]
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "targets": [
                {"trace": n, "target": t, "kind": k, "factor": f, "met": ok, "detail": d}
                for n, t, k, f, ok, d in targets]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
