"""``python -m cachalot.report SNAPSHOT.pickle``: what a PyTorch job's memory needs, on one screen.

From a PyTorch memory snapshot (``torch.cuda.memory._dump_snapshot``) it converts the trace
(cachalot.convert: the live set when the recorded window began is reconstructed), replays it
with cachalot-replay on the simulated device and prints:
  - the live peak (requested bytes) and what PyTorch reserved on the GPU, as recorded (set beside
    cachalot's figures only for a cold-start window; otherwise the reason, and the peak minus
    what PyTorch had reserved before the window, labelled);
  - for cachalot with its defaults and with the CACHALOT_CONF that ``cachalot-replay --tune``
    recommends at the GPU's size: the smallest device the trace fits on, the peak reserved at
    the GPU's size, device calls, synchronizations and the modeled device time;
  - the same for PyTorch's own caching allocator replaying the same trace (expandable segments
    off and on), when cachalot-pytorch-replay is built (tools/pytorch_peer);
  - the code holding the most memory at the live peak, when the snapshot has stack frames;
and writes an SVG of live bytes, PyTorch's recorded reserved bytes and cachalot's reserved
bytes over the trace. Exit status: 0, or 2 for a bad snapshot, bad arguments or a missing tool.
"""
import argparse
import csv
import json
import os
import re
import sys
import tempfile

from . import _replaytools as rt
from . import _svg
from .convert import SnapshotError, convert, load_snapshot

__all__ = ["main", "parse_size", "format_bytes"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.I)
_SCALE = {"b": 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20,
          "gib": 1 << 30, "gb": 1 << 30, "tib": 1 << 40, "tb": 1 << 40}


def parse_size(text):
    """Bytes from "80GiB", "512MiB" or a plain number of bytes. Raises ValueError."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError("bad size %r (e.g. 80GiB, 512MiB or bytes)" % text)
    value = float(m.group(1)) * _SCALE[(m.group(2) or "b").lower()]
    if value < 1:
        raise ValueError("size %r must be above 0" % text)
    return int(value)


def format_bytes(n):
    """Binary units with two decimals, as cachalot-replay prints them ("6.53 GiB")."""
    if n is None:
        return "-"
    for scale, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return "%.2f %s" % (n / scale, unit)
    return "%d B" % n


def _short_site(site, parts=2):
    """The last `parts` components of a site's path ("cs336_basics/model.py:54 forward")."""
    prefix = ""
    if site.startswith("(freed at) "):
        prefix, site = "(freed at) ", site[len("(freed at) "):]
    path, _, rest = site.partition(" ")
    return prefix + "/".join(path.split("/")[-parts:]) + (" " + rest if rest else "")


class _Row:
    """One allocator's line of the table: its replay at the GPU's size and its smallest device."""

    def __init__(self, label, at_gpu, smallest, conf=None):
        self.label, self.at_gpu, self.smallest, self.conf = label, at_gpu, smallest, conf

    def cells(self):
        f = self.at_gpu
        oom = "" if f.complete else " (%d OOM)" % f.ooms
        return [self.label, format_bytes(self.smallest), format_bytes(f.peak_reserved) + oom,
                str(f.device_calls), str(f.syncs),
                "%.3f ms" % f.device_ms if f.device_ms is not None else "n/a"]

    def as_dict(self):
        f = self.at_gpu
        return {"label": self.label, "conf": self.conf, "smallest_device_bytes": self.smallest,
                "peak_reserved_bytes": f.peak_reserved, "complete": f.complete,
                "ooms": f.ooms, "device_calls": f.device_calls, "syncs": f.syncs,
                "device_ms": f.device_ms}


def _table(rows, capacity):
    head = ["on a GPU of %s" % format_bytes(capacity), "smallest device", "peak reserved",
            "device calls", "syncs", "device time (modeled)"]
    cells = [head] + [r.cells() for r in rows]
    width = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = []
    for c in cells:
        lines.append("  " + c[0].ljust(width[0]) + "".join(
            "  " + c[i].rjust(width[i]) for i in range(1, len(c))))
    return lines


def _pytorch_lines(r):
    if r.cold_start:
        return ["PyTorch on the GPU (recorded): peak reserved %s (a cold start: the window holds "
                "its whole run, comparable)" % format_bytes(r.pytorch_peak_reserved)]
    how = "" if r.pytorch_peak_exact else "at least "
    return ["PyTorch on the GPU (recorded): peak reserved %s%s; not comparable with a replay, "
            "which starts empty:" % (how, format_bytes(r.pytorch_peak_reserved)),
            "  it had %s%s reserved before the recorded window began (its cache of earlier "
            "phases); peak minus that: %s" % (
                how, format_bytes(r.reserved_at_start),
                format_bytes(r.pytorch_peak_reserved - r.reserved_at_start))]


def _timeline(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return ([(int(x["op"]), int(x["requested"])) for x in rows],
            [(int(x["op"]), int(x["reserved"])) for x in rows])


def _chart(name, conversion, default_tl, recommended_tl, capacity):
    live, reserved = _timeline(default_tl)
    series = [_svg.Series("PyTorch reserved (recorded on the GPU)", conversion.reserved_curve,
                          "#9467bd", 3.0),
              _svg.Series("cachalot reserved, defaults", reserved, "#d62728", 2.2)]
    if recommended_tl:
        series.append(_svg.Series("cachalot reserved, recommended CACHALOT_CONF",
                                  _timeline(recommended_tl)[1], "#2ca02c", 1.6))
    series.append(_svg.Series("live (requested) bytes", live, "#1f77b4", 1.4, dashed=True))
    markers = [(conversion.reconstructed, "recorded window begins")] if conversion.reconstructed \
        else []
    return _svg.line_chart("%s: memory over the trace" % name,
                           "cachalot replayed on the simulated device at %s; PyTorch as the "
                           "snapshot recorded it" % format_bytes(capacity), series,
                           markers=markers)


def _replay_rows(args, tool, trace, conf, work):
    """The table's rows (cachalot with each config, then PyTorch's allocator when built), the
    trace's live peak and cachalot's timelines."""
    cap = args.capacity
    rows, timelines, peak = [], [], None
    configs = [("cachalot, defaults", "")]
    if conf is not None:
        configs.append(("cachalot, recommended", conf))
    for i, (label, cfg) in enumerate(configs):
        tl = os.path.join(work, "timeline%d.csv" % i)
        at_gpu = rt.cachalot_run(tool, trace, cap, cfg, timeline=tl)
        peak = at_gpu.doc["trace_peak_requested_bytes"]
        smallest, _ = rt.smallest_capacity(
            lambda c, cfg=cfg: rt.cachalot_run(tool, trace, c, cfg).complete, peak)
        rows.append(_Row(label, at_gpu, smallest, cfg))
        timelines.append(tl)
    peer = rt.find_pytorch_replay(args.pytorch_replay)
    if peer is not None:
        for expandable in (False, True):
            at_gpu = rt.pytorch_run(peer, trace, cap, expandable)
            smallest, _ = rt.smallest_capacity(
                lambda c, e=expandable: rt.pytorch_run(peer, trace, c, e, True).complete, peak)
            rows.append(_Row("PyTorch %s%s, replayed" % (
                at_gpu.doc["pytorch_version"], ", expandable" if expandable else ""), at_gpu,
                smallest, "expandable_segments:True" if expandable else ""))
    return rows, peak, timelines


def _report(args, out):
    snap = load_snapshot(args.snapshot)
    r = convert(snap, args.device)
    work = tempfile.mkdtemp(prefix="cachalot_report_")
    trace = args.trace or os.path.join(work, "trace.csv")
    with open(trace, "w", encoding="ascii") as f:
        f.write("\n".join(r.lines) + "\n")
    tool = rt.find_replay(args.replay)
    if tool is None:
        raise rt.ToolError("cachalot-replay not found: build it (cmake --build) or give "
                           "--replay PATH (or CACHALOT_REPLAY)")
    conf = None if args.no_tune else rt.recommended_conf(tool, trace, args.capacity)
    rows, peak, timelines = _replay_rows(args, tool, trace, conf, work)
    probe = rows[0].at_gpu
    name = os.path.basename(args.snapshot)
    svg = args.svg or os.path.splitext(name)[0] + "-report.svg"
    with open(svg, "w", encoding="utf-8") as f:
        f.write(_chart(name, r, timelines[0], timelines[1] if len(timelines) > 1 else None,
                       args.capacity))
    holders = probe.doc.get("peak_holders", [])
    if args.json:
        out.write(json.dumps({
            "snapshot": args.snapshot, "device": r.device, "ops": probe.doc["ops"],
            "live_peak_bytes": peak, "reconstructed_allocations": r.reconstructed,
            "reconstructed_bytes": r.reconstructed_bytes,
            "pytorch_recorded_peak_reserved_bytes": r.pytorch_peak_reserved,
            "pytorch_reserved_at_start_bytes": r.reserved_at_start,
            "pytorch_cold_start": r.cold_start, "capacity_bytes": args.capacity,
            "recommended": conf, "rows": [x.as_dict() for x in rows], "peak_holders": holders,
            "svg": svg}) + "\n")
        return 0
    lines = ["cachalot report: %s (device %d, %d operations, %d stream%s)" % (
        name, r.device, probe.doc["ops"], len(r.streams), "" if len(r.streams) == 1 else "s")]
    if r.reconstructed:
        lines.append("  the live set when the recorded window began is reconstructed: %d "
                     "allocations, %s" % (r.reconstructed, format_bytes(r.reconstructed_bytes)))
    lines.append("live peak (requested bytes): %s" % format_bytes(peak))
    lines += _pytorch_lines(r)
    lines.append("")
    lines += _table(rows, args.capacity)
    lines.append("")
    if conf is not None:
        lines.append("recommended: CACHALOT_CONF=%s" % (conf or "(the defaults)"))
    if holders:
        lines.append("at the live peak, held by:")
        lines += ["  %10s  %5d allocations  %s" % (format_bytes(h["bytes"]), h["allocations"],
                                                    _short_site(h["site"]))
                  for h in holders[:4]]
    lines.append("chart: %s (live bytes, PyTorch's reserved as recorded, cachalot's reserved)"
                 % svg)
    if args.trace:
        lines.append("trace: %s" % args.trace)
    out.write("\n".join(lines) + "\n")
    return 0


def main(argv=None, out=None):
    """The command line; returns the exit status."""
    out = out or sys.stdout
    p = argparse.ArgumentParser(
        prog="python -m cachalot.report",
        description="What a PyTorch job's memory needs with cachalot, from its memory snapshot.")
    p.add_argument("snapshot", help="the snapshot pickle (torch.cuda.memory._dump_snapshot)")
    p.add_argument("--capacity", default="80GiB",
                   help="the GPU's memory (default 80GiB): the replays' capacity and --tune's")
    p.add_argument("--svg", help="the chart to write (default: SNAPSHOT-report.svg here)")
    p.add_argument("--trace", help="also keep the converted trace at this path")
    p.add_argument("--device", type=int, default=None, help="device whose events to use")
    p.add_argument("--replay", help="the cachalot-replay executable")
    p.add_argument("--pytorch-replay", help="the cachalot-pytorch-replay executable (optional)")
    p.add_argument("--no-tune", action="store_true", help="skip the recommended CACHALOT_CONF")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the text")
    args = p.parse_args(argv)
    try:
        args.capacity = parse_size(args.capacity)
    except ValueError as e:
        print("cachalot.report: error: --capacity: %s" % e, file=sys.stderr)
        return 2
    try:
        return _report(args, out)
    except SnapshotError as e:
        print("cachalot.report: error: %s: %s" % (args.snapshot, e), file=sys.stderr)
    except rt.ToolError as e:
        print("cachalot.report: error: %s" % e, file=sys.stderr)
    except OSError as e:
        print("cachalot.report: error: %s: %s" % (e.filename or "", e.strerror or e),
              file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
