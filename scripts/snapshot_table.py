#!/usr/bin/env python3
"""The table of docs/benchmarks.md "Real PyTorch snapshots": cachalot against PyTorch's own caching
allocator on the same traces, from one command.

  scripts/snapshot_table.py --snapshots SNAPSHOTS.tar.xz|DIR --replay BUILD/tools/cachalot-replay \
      --pytorch-replay PT_BUILD/tools/pytorch_peer/cachalot-pytorch-replay [--capacity 80GiB]

Every snapshot (*.pickle) is converted with cachalot.convert (the live set when its window began
reconstructed), then replayed by five allocators, each trace the same for all: cachalot with its
defaults (fixed segments), with expandable_segments:1, and with the CACHALOT_CONF that
`cachalot-replay --tune` recommends at the GPU's size; PyTorch's caching allocator (built from its
source, tools/pytorch_peer) with expandable segments off and on. For each: the smallest device
without an out-of-memory error (bisected to 2 MiB, one process per probe), and at the GPU's size
the peak reserved, device calls (segment allocations and frees, chunk maps and unmaps), syncs
(explicit, plus the one each segment free implies) and the modeled device time (cachalot's cost
model pricing each allocator's own calls). Then the checks: PyTorch's replay ends with the
snapshot's allocated bytes (the reconstruction is complete), and on a cold-start snapshot it
reserves exactly the peak PyTorch recorded on the GPU, with the same segment sizes. Markdown on
standard output (--json FILE: every figure); a tarball is unpacked into a temporary folder.
Without --pytorch-replay the PyTorch columns say "not built".
"""
import argparse
import json
import os
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from cachalot import _replaytools as rt  # noqa: E402
from cachalot.convert import convert, load_snapshot  # noqa: E402
from cachalot.report import format_bytes, parse_size  # noqa: E402

ALLOCATORS = ("cachalot fixed", "cachalot expandable", "cachalot recommended", "PyTorch",
              "PyTorch expandable")


def snapshot_paths(source, work):
    if os.path.isdir(source):
        folder = source
    else:
        folder = os.path.join(work, "snapshots")
        with tarfile.open(source) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and ".." not in m.name and
                       not m.name.startswith("/")]
            tar.extractall(folder, members=members)
    found = []
    for root, _, files in os.walk(folder):
        found += [os.path.join(root, f) for f in files if f.endswith(".pickle")]
    return sorted(found, key=os.path.basename)


def gib(n):
    return "-" if n is None else "%.2f" % (n / (1 << 30))


def measure(name, probe, at_gpu, peak):
    smallest, probes = rt.smallest_capacity(probe, peak)
    return {"allocator": name, "smallest_bytes": smallest, "probes": probes,
            "peak_reserved_bytes": at_gpu.peak_reserved, "complete": at_gpu.complete,
            "device_calls": at_gpu.device_calls, "syncs": at_gpu.syncs,
            "device_ms": at_gpu.device_ms, "doc": at_gpu.doc}


def run_snapshot(path, args, work):
    snap = load_snapshot(path)
    conv = convert(snap)
    trace = os.path.join(work, os.path.basename(path).replace(".pickle", ".csv"))
    with open(trace, "w", encoding="ascii") as f:
        f.write("\n".join(conv.lines) + "\n")
    cap = args.capacity
    rec = rt.recommended_conf(args.replay, trace, cap)
    out = {"snapshot": os.path.basename(path), "conversion": conv, "recommended": rec,
           "rows": {}}
    for name, cfg in (("cachalot fixed", ""), ("cachalot expandable", "expandable_segments:1"),
                      ("cachalot recommended", rec)):
        at_gpu = rt.cachalot_run(args.replay, trace, cap, cfg)
        out["peak"] = at_gpu.doc["trace_peak_requested_bytes"]
        out["rows"][name] = measure(
            name, lambda c, cfg=cfg: rt.cachalot_run(args.replay, trace, c, cfg).complete, at_gpu,
            out["peak"])
    if args.pytorch_replay:
        for name, exp in (("PyTorch", False), ("PyTorch expandable", True)):
            at_gpu = rt.pytorch_run(args.pytorch_replay, trace, cap, exp)
            out["rows"][name] = measure(
                name, lambda c, e=exp: rt.pytorch_run(args.pytorch_replay, trace, c, e,
                                                      True).complete, at_gpu, out["peak"])
    return out


def cell(row, key, fmt):
    if row is None:
        return "not built"
    return fmt(row[key])


def table(results, title, key, fmt, cap):
    lines = ["| snapshot | live peak (GiB) | " + " | ".join(ALLOCATORS) + " |",
             "|---|---:|" + "---:|" * len(ALLOCATORS)]
    for r in results:
        cells = [cell(r["rows"].get(a), key, fmt) for a in ALLOCATORS]
        lines.append("| %s | %s | %s |" % (r["snapshot"].replace(".pickle", ""), gib(r["peak"]),
                                         " | ".join(cells)))
    return ["**%s** (capacity %s where it applies)" % (title, format_bytes(cap)), ""] + lines + [""]


def goal_lines(results):
    """The goal: cachalot's smallest device <= PyTorch's, with no more device calls."""
    lines = ["| snapshot | fixed vs PyTorch | expandable vs PyTorch expandable | "
             "recommended vs PyTorch's better |", "|---|---|---|---|"]
    met_all = True
    for r in results:
        rows = r["rows"]
        if "PyTorch" not in rows:
            return ["(PyTorch's allocator not built: no goal check)"], None
        best_pt = min((rows["PyTorch"], rows["PyTorch expandable"]),
                      key=lambda x: (x["smallest_bytes"] or float("inf"), x["device_calls"]))
        cells = []
        for ours, theirs in (("cachalot fixed", rows["PyTorch"]),
                             ("cachalot expandable", rows["PyTorch expandable"]),
                             ("cachalot recommended", best_pt)):
            a = rows[ours]
            mem = a["smallest_bytes"] is not None and (theirs["smallest_bytes"] is None or
                                                      a["smallest_bytes"] <= theirs["smallest_bytes"])
            calls = a["device_calls"] <= theirs["device_calls"]
            ok = mem and calls
            met_all = met_all and (ok or ours != "cachalot recommended")
            cells.append("%s (%s vs %s GiB, %d vs %d calls)" % (
                "met" if ok else "NOT met: " + ", ".join(
                    w for w, bad in (("memory", not mem), ("calls", not calls)) if bad),
                gib(a["smallest_bytes"]), gib(theirs["smallest_bytes"]), a["device_calls"],
                theirs["device_calls"]))
        lines.append("| %s | %s |" % (r["snapshot"].replace(".pickle", ""), " | ".join(cells)))
    return lines, met_all


def check_lines(results):
    """PyTorch's replay against the snapshot: the end state, and on a cold start the peak."""
    lines = ["| snapshot | live set reconstructed | trace's live bytes at its end = snapshot's "
             "allocated (requested bytes) | PyTorch replay at its end: requested bytes = "
             "snapshot's; block bytes (rounded, split remainders) | cold start: replayed peak = "
             "recorded peak, same cudaMalloc sizes |", "|---|---|---|---|---|"]
    for r in results:
        c = r["conversion"]
        pt = r["rows"].get("PyTorch")
        if pt is None:
            end = "not built"
        else:
            doc = pt["doc"]
            same = doc["end_requested_bytes"] == c.requested_at_snapshot
            blocks = doc["end_allocated_bytes"] - c.allocated_at_snapshot
            end = "%s; blocks %s" % ("yes" if same else "NO (%d vs %d B)" % (
                doc["end_requested_bytes"], c.requested_at_snapshot),
                "the same" if blocks == 0 else "%+d B" % blocks)
        if not c.cold_start:
            cold = "not a cold start"
        elif pt is None:
            cold = "not built"
        else:
            snap_sizes = r["segment_allocs"]
            same_peak = pt["peak_reserved_bytes"] == c.pytorch_peak_reserved
            same_sizes = pt["doc"]["segment_sizes"] == snap_sizes
            cold = "%s: %d B replayed, %d B recorded; %d segments %s" % (
                "yes" if same_peak and same_sizes else "NO", pt["peak_reserved_bytes"],
                c.pytorch_peak_reserved, len(snap_sizes),
                "of the same sizes" if same_sizes else "DIFFER")
        lines.append("| %s | %d allocations, %s | %s | %s | %s |" % (
            r["snapshot"].replace(".pickle", ""), c.reconstructed,
            format_bytes(c.reconstructed_bytes),
            "yes" if c.live_bytes_at_end == c.requested_at_snapshot else "NO", end, cold))
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--snapshots", required=True, help="a folder of *.pickle or a .tar.xz of them")
    p.add_argument("--replay", help="cachalot-replay (default: found as cachalot.report does)")
    p.add_argument("--pytorch-replay", help="cachalot-pytorch-replay (optional)")
    p.add_argument("--capacity", default="80GiB", help="the GPU's size (default 80GiB)")
    p.add_argument("--json", help="also write every figure to this file")
    args = p.parse_args()
    args.capacity = parse_size(args.capacity)
    args.replay = rt.find_replay(args.replay)
    if not args.replay:
        sys.exit("snapshot_table.py: cachalot-replay not found (--replay)")
    args.pytorch_replay = rt.find_pytorch_replay(args.pytorch_replay)
    results = []
    with tempfile.TemporaryDirectory(prefix="cachalot_snapshots_") as work:
        for path in snapshot_paths(args.snapshots, work):
            print("replaying %s ..." % os.path.basename(path), file=sys.stderr)
            r = run_snapshot(path, args, work)
            snap = load_snapshot(path)
            events = snap["device_traces"][r["conversion"].device]
            r["segment_allocs"] = [e["size"] for e in events if e.get("action") == "segment_alloc"]
            results.append(r)
    version = next((r["rows"]["PyTorch"]["doc"]["pytorch_version"] for r in results
                    if "PyTorch" in r["rows"]), None)
    out = ["PyTorch's caching allocator: %s" % (
        "PyTorch %s, built from its source by tools/pytorch_peer, replayed on the host-only "
        "CUDA stand-in" % version if version else "not built (no --pytorch-replay)"), ""]
    cap = args.capacity
    out += table(results, "Smallest device without an out-of-memory error (GiB, to 2 MiB)",
                 "smallest_bytes", gib, cap)
    out += table(results, "Peak reserved at %s (GiB)" % format_bytes(cap), "peak_reserved_bytes",
                 gib, cap)
    out += table(results, "Device calls at %s (segment allocs + frees + chunk maps + unmaps)"
                 % format_bytes(cap), "device_calls", str, cap)
    out += table(results, "Syncs at %s (explicit + implied by segment frees)" % format_bytes(cap),
                 "syncs", str, cap)
    out += table(results, "Modeled device time at %s (ms, cachalot's cost model)"
                 % format_bytes(cap), "device_ms",
                 lambda v: "n/a" if v is None else "%.1f" % v, cap)
    out += ["**Recommended CACHALOT_CONF** (`cachalot-replay --tune --capacity %s`)" %
            format_bytes(cap), ""]
    out += ["- %s: `%s`" % (r["snapshot"].replace(".pickle", ""), r["recommended"] or "(defaults)")
            for r in results] + [""]
    out += ["**Checks against the snapshots**", ""] + check_lines(results) + [""]
    goal, met = goal_lines(results)
    out += ["**Goal: cachalot's smallest device <= PyTorch's, with no more device calls**", ""]
    out += goal + [""]
    if met is not None:
        out.append("Goal (recommended config against PyTorch's better setting) met on every "
                   "snapshot: %s" % ("yes" if met else "no"))
    print("\n".join(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"snapshot": r["snapshot"], "peak": r["peak"], "recommended":
                        r["recommended"], "rows": {k: {x: y for x, y in v.items() if x != "doc"}
                                                   for k, v in r["rows"].items()}}
                       for r in results], f, indent=1)


if __name__ == "__main__":
    main()
