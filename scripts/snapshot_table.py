#!/usr/bin/env python3
"""The table of docs/benchmarks.md "Real PyTorch snapshots": cachalot against PyTorch's own caching
allocator on the same traces, from one command.

  scripts/snapshot_table.py --snapshots SNAPSHOTS.tar.xz|DIR --replay BUILD/tools/cachalot-replay \
      --pytorch-replay PT_BUILD/tools/pytorch_peer/cachalot-pytorch-replay [--capacity 80GiB]

Every snapshot (*.pickle) is converted with cachalot.convert (the live set when its window began
reconstructed), then replayed by six allocators, each trace the same for all: cachalot with its
defaults (fixed segments), with expandable_segments:1, with expandable segments mapping 20 MiB
chunks in the large pool (large_chunk:20MiB, PyTorch's page), and with the CACHALOT_CONF that
`cachalot-replay --tune` recommends at the GPU's size; PyTorch's caching allocator (built from its
source, tools/pytorch_peer) with expandable segments off and on. For each: the smallest device
without an out-of-memory error (bisected to 2 MiB, one process per probe), and at the GPU's size
the peak reserved, device calls (segment allocations and frees, an expandable segment's address
range counting as one for both allocators, chunk maps and unmaps), syncs
(explicit, plus the one each segment free implies) and the modeled device time (cachalot's cost
model pricing each allocator's own calls). Then the checks: PyTorch's replay ends with the
snapshot's allocated bytes (the reconstruction is complete), and on a cold-start snapshot it
reserves exactly the peak PyTorch recorded on the GPU, with the same segment sizes. Markdown on
standard output (--json FILE: every figure); a tarball is unpacked into a temporary folder.

PyTorch's figures do not change when cachalot does: `--pytorch-figures FILE` with
--pytorch-replay saves them (labelled with PyTorch's version, each trace's SHA-256, the capacity,
the granule and the cost model pricing the calls: cachalot/_peerfigures.py), and without
--pytorch-replay reads them back instead of running PyTorch's allocator, refusing (exit 2) a
file whose figures are not those of these traces, this capacity or cachalot-replay's cost model.
Without either, the PyTorch columns say "not built" (unless cachalot-pytorch-replay is found as
cachalot/_replaytools.py finds it).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from cachalot import _peerfigures as pf  # noqa: E402
from cachalot import _replaytools as rt  # noqa: E402
from cachalot.convert import convert, load_snapshot  # noqa: E402
from cachalot.report import format_bytes, parse_size  # noqa: E402

ALLOCATORS = ("cachalot fixed", "cachalot expandable", "cachalot expandable 20MiB",
              "cachalot recommended", "PyTorch", "PyTorch expandable")
EXPANDABLE_20MIB = "expandable_segments:1,large_chunk:20MiB"  # PyTorch's page for the large pool


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
    events = snap["device_traces"][conv.device]
    out = {"snapshot": os.path.basename(path), "conversion": conv, "rows": {},
           "segment_allocs": [e["size"] for e in events if e.get("action") == "segment_alloc"]}
    fixed = rt.cachalot_run(args.replay, trace, cap)
    out["peak"] = fixed.doc["trace_peak_requested_bytes"]
    cost_model = fixed.doc.get("cost_model")
    saved = None
    if args.figures is not None and not args.pytorch_replay:  # refused before any search
        saved = args.figures.rows_for(out["snapshot"], pf.trace_sha256(trace), cap, rt.GRANULE,
                                      cost_model)
    out["recommended"] = rec = rt.recommended_conf(args.replay, trace, cap)
    for name, cfg in (("cachalot fixed", ""), ("cachalot expandable", "expandable_segments:1"),
                      ("cachalot expandable 20MiB", EXPANDABLE_20MIB),
                      ("cachalot recommended", rec)):
        at_gpu = fixed if not cfg else rt.cachalot_run(args.replay, trace, cap, cfg)
        out["rows"][name] = measure(
            name, lambda c, cfg=cfg: rt.cachalot_run(args.replay, trace, c, cfg).complete, at_gpu,
            out["peak"])
    if saved is not None:  # (calls counted from the saved replay's JSON, as a new replay would)
        for name, row in saved.items():
            f = rt.Figures(row["doc"], "pytorch") if "calls" in row.get("doc", {}) else None
            out["rows"][name] = row if f is None else dict(row, device_calls=f.device_calls,
                                                           syncs=f.syncs)
    elif args.pytorch_replay:
        out["rows"].update(measure_pytorch(out["snapshot"], trace, out["peak"], cost_model, args))
    return out


def measure_pytorch(snapshot, trace, peak, cost_model, args):
    """PyTorch's rows, measured by its replay tool (and recorded in args.figures when they are
    saved). @raises pf.FiguresError when its calls are priced otherwise than cachalot's"""
    rows = {}
    for name, exp in (("PyTorch", False), ("PyTorch expandable", True)):
        at_gpu = rt.pytorch_run(args.pytorch_replay, trace, args.capacity, exp)
        rows[name] = measure(
            name, lambda c, e=exp: rt.pytorch_run(args.pytorch_replay, trace, c, e,
                                                  True).complete, at_gpu, peak)
        if rows[name]["doc"].get("cost_model") != cost_model:
            raise pf.FiguresError("%s: PyTorch's replay priced its calls with %s, cachalot-replay "
                                  "with %s" % (snapshot, rows[name]["doc"].get("cost_model"),
                                               cost_model))
    if args.figures is not None:
        args.figures.add(snapshot, pf.trace_sha256(trace), rows)
    return rows


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


COMPARISONS = (("fixed vs PyTorch", ("cachalot fixed",), ("PyTorch",)),
               ("expandable vs PyTorch expandable", ("cachalot expandable",),
                ("PyTorch expandable",)),
               ("expandable 20MiB vs PyTorch expandable", ("cachalot expandable 20MiB",),
                ("PyTorch expandable",)),
               ("recommended vs PyTorch's better", ("cachalot recommended",),
                ("PyTorch", "PyTorch expandable")),
               ("best of cachalot's settings vs PyTorch's best",
                ("cachalot fixed", "cachalot expandable", "cachalot expandable 20MiB",
                 "cachalot recommended"),
                ("PyTorch", "PyTorch expandable")))


def best(rows, names):
    """The row of `names` with the smallest device, then the fewest device calls."""
    return min((rows[n] for n in names), key=lambda x: (
        float("inf") if x["smallest_bytes"] is None else x["smallest_bytes"], x["device_calls"]))


def fits_in(a, b):
    """True if row a's smallest device is at most row b's."""
    return a["smallest_bytes"] is not None and (
        b["smallest_bytes"] is None or a["smallest_bytes"] <= b["smallest_bytes"])


def mib(n):
    return "-" if n is None else "%d" % (n >> 20)


def goal_lines(results):
    """The goal: cachalot's smallest device <= PyTorch's, with no more device calls, like with
    like (fixed, expandable) and each side's best setting. Returns (lines, met on every
    snapshot by the recommended config against PyTorch's better setting, or None)."""
    if any("PyTorch" not in r["rows"] for r in results):
        return ["(PyTorch's allocator not built: no goal check)"], None
    lines = ["| snapshot | " + " | ".join(c[0] for c in COMPARISONS) + " |",
             "|---|" + "---|" * len(COMPARISONS)]
    counts = [[0, 0, 0] for _ in COMPARISONS]
    for r in results:
        rows = r["rows"]
        cells = []
        for i, (_, ours_names, theirs_names) in enumerate(COMPARISONS):
            b = best(rows, theirs_names)
            # of several settings of ours: one that meets both halves if any, else the best
            meeting = [n for n in ours_names if fits_in(rows[n], b) and
                       rows[n]["device_calls"] <= b["device_calls"]]
            a = best(rows, meeting or ours_names)
            mem = fits_in(a, b)
            calls = a["device_calls"] <= b["device_calls"]
            for k, ok in enumerate((mem, calls, mem and calls)):
                counts[i][k] += ok
            who = "" if len(ours_names) == 1 else "%s vs %s: " % (
                a["allocator"].replace("cachalot ", ""), b["allocator"])
            cells.append("%s (%s%s vs %s MiB, %d vs %d calls)" % (
                "met" if mem and calls else "NOT met: " + ", ".join(
                    w for w, bad in (("memory", not mem), ("calls", not calls)) if bad),
                who, mib(a["smallest_bytes"]), mib(b["smallest_bytes"]), a["device_calls"],
                b["device_calls"]))
        lines.append("| %s | %s |" % (r["snapshot"].replace(".pickle", ""), " | ".join(cells)))
    n = len(results)
    lines += ["", "| goal met on | " + " | ".join(c[0] for c in COMPARISONS) + " |",
              "|---|" + "---:|" * len(COMPARISONS)]
    for k, what in enumerate(("smallest device <= PyTorch's", "device calls <= PyTorch's",
                              "both")):
        lines.append("| %s | %s |" % (what, " | ".join("%d of %d" % (c[k], n) for c in counts)))
    return lines, counts[2][2] == n


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
    p.add_argument("--pytorch-figures", metavar="FILE",
                   help="with --pytorch-replay: save PyTorch's figures to FILE; without it: read "
                        "them from FILE instead of running PyTorch's allocator")
    args = p.parse_args()
    started = time.monotonic()
    args.capacity = parse_size(args.capacity)
    args.replay = rt.find_replay(args.replay)
    if not args.replay:
        sys.exit("snapshot_table.py: cachalot-replay not found (--replay)")
    args.figures = None
    if args.pytorch_figures and not args.pytorch_replay:
        try:
            args.figures = pf.PeerFigures.load(args.pytorch_figures)
        except pf.FiguresError as e:
            fail(e)
    else:
        args.pytorch_replay = rt.find_pytorch_replay(args.pytorch_replay)
        if args.pytorch_figures:
            args.figures = pf.PeerFigures(args.capacity, rt.GRANULE, utc_now(), {
                "pytorch_replay": os.path.abspath(args.pytorch_replay),
                "cachalot_commit": cachalot_commit()})
    results = []
    with tempfile.TemporaryDirectory(prefix="cachalot_snapshots_") as work:
        for path in snapshot_paths(args.snapshots, work):
            print("replaying %s ..." % os.path.basename(path), file=sys.stderr)
            try:
                r = run_snapshot(path, args, work)
            except pf.FiguresError as e:
                fail(e)
            results.append(r)
    if args.pytorch_replay and args.figures is not None:
        args.figures.save(args.pytorch_figures)
    version = next((r["rows"]["PyTorch"]["doc"]["pytorch_version"] for r in results
                    if "PyTorch" in r["rows"]), None)
    source = ""
    if args.figures is not None and not args.pytorch_replay:
        source = " (figures read from %s, measured %s%s)" % (
            os.path.basename(args.pytorch_figures), args.figures.doc.get("measured") or "?",
            " with cachalot at %s" % args.figures.doc["measured_with"]["cachalot_commit"]
            if args.figures.doc.get("measured_with", {}).get("cachalot_commit") else "")
    out = ["PyTorch's caching allocator: %s" % (
        "PyTorch %s, built from its source by tools/pytorch_peer, replayed on the host-only "
        "CUDA stand-in%s" % (version, source) if version else
        "not built (no --pytorch-replay)"), ""]
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
    out += ["**Goal: cachalot's smallest device <= PyTorch's, with no more device calls** "
            "(smallest devices in MiB; PyTorch's better or best: the smallest device of its two "
            "settings, then the fewer calls; best of cachalot's: a setting that meets both "
            "halves if one does, else the smallest device)", ""]
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
    print("snapshot_table.py: %d snapshots in %.1f s" % (len(results),
                                                         time.monotonic() - started),
          file=sys.stderr)


def fail(error):
    print("snapshot_table.py: error: %s" % error, file=sys.stderr)
    sys.exit(2)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def cachalot_commit():
    """The commit of the checkout this script is in (None outside a git checkout)."""
    try:
        p = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                            "--short", "HEAD"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return p.stdout.strip() or None if p.returncode == 0 else None


if __name__ == "__main__":
    main()
