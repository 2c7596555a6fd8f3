#!/usr/bin/env python3
"""Capacity scan: replays every trace with cachalot-replay on simulated devices of 1.00x to
2.00x the trace's peak requested bytes (1 % steps), with fixed and with expandable segments,
and reports per trace and setting: the smallest capacity with no out-of-memory error, whether
more capacity ever gave more errors (monotonicity), and the figures at 1.2x (peak reserved /
peak requested, chunk maps and unmaps, synchronizations). With --svg, also charts the errors
against the capacity.

Usage: scripts/capacity_scan.py [--replay PATH] [--traces DIR] [--svg FILE] [--json FILE]
                                [--from 1.00] [--to 2.00]
Needs only the Python 3 standard library and a built cachalot-replay.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

SETTINGS = {"fixed": "expandable_segments:0", "expandable": "expandable_segments:1"}


def replay(binary, config, factor, traces):
    """One cachalot-replay run over all traces; {trace name: result}."""
    cmd = [binary, "--json", "--no-baseline", "--repeat", "1", "--one-thread",
           "--capacity-factor", "%.2f" % factor, "--config", config] + traces
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    results = {}
    for line in out.splitlines():
        if line.strip():
            r = json.loads(line)
            results[os.path.basename(r["trace"])] = r
    return results


def scan(binary, traces, lo, hi):
    """{setting: {trace: {pct: result}}}."""
    data = {s: {os.path.basename(t): {} for t in traces} for s in SETTINGS}
    for setting, config in SETTINGS.items():
        for pct in range(lo, hi + 1):
            for name, r in replay(binary, config, pct / 100.0, traces).items():
                data[setting][name][pct] = r
            print("%s %.2fx done" % (setting, pct / 100.0), file=sys.stderr)
    return data


def summary(runs):
    """Smallest factor with no OOM, and the 1 % steps where more capacity gave more OOMs."""
    pcts = sorted(runs)
    first_ok = next((p for p in pcts if runs[p]["ooms"] == 0), None)
    worse = [p for a, p in zip(pcts, pcts[1:]) if runs[p]["ooms"] > runs[a]["ooms"]]
    return first_ok, worse


def svg_chart(data, path, lo, hi):
    """Out-of-memory errors against capacity, one panel per setting, one line per trace."""
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    w, h, pad = 460, 300, 50
    top = max(1, max(r["ooms"] for s in data.values() for t in s.values() for r in t.values()))
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'font-family="sans-serif" font-size="11">' % (2 * w + 220, h + 40)]
    for panel, (setting, traces) in enumerate(sorted(data.items(), reverse=True)):
        x0 = panel * w
        parts.append('<text x="%d" y="16" font-size="13">%s segments: out-of-memory errors '
                     'vs capacity / peak</text>' % (x0 + pad, setting))
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
                     % (x0 + pad, 25, w - pad - 10, h - pad))

        def px(pct, x0=x0):
            return x0 + pad + (pct - lo) * (w - pad - 10) / float(hi - lo)

        def py(v):
            return 25 + (h - pad) * (1 - v / float(top))

        for pct in range(lo, hi + 1, 10):
            parts.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>'
                         % (px(pct), h - 10, pct / 100.0))
        for v in (0, top // 2, top):
            parts.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>'
                         % (x0 + pad - 4, py(v) + 4, v))
        for i, (name, runs) in enumerate(sorted(traces.items())):
            pts = " ".join("%.1f,%.1f" % (px(p), py(runs[p]["ooms"])) for p in sorted(runs))
            parts.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                         % (colours[i % len(colours)], pts))
    names = sorted(next(iter(data.values())))
    for i, name in enumerate(names):
        y = 40 + 16 * i
        parts.append('<rect x="%d" y="%d" width="12" height="3" fill="%s"/>'
                     % (2 * w + 10, y - 4, colours[i % len(colours)]))
        parts.append('<text x="%d" y="%d">%s</text>' % (2 * w + 28, y, name.replace(".csv", "")))
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replay", default=os.path.join(here, "..", "build", "tools",
                                                     "cachalot-replay"))
    ap.add_argument("--traces", default=os.path.join(here, "..", "bench", "traces"))
    ap.add_argument("--svg")
    ap.add_argument("--json")
    ap.add_argument("--from", dest="lo", type=float, default=1.00)
    ap.add_argument("--to", dest="hi", type=float, default=2.00)
    a = ap.parse_args()
    traces = sorted(glob.glob(os.path.join(a.traces, "*.csv")))
    lo, hi = int(round(a.lo * 100)), int(round(a.hi * 100))
    data = scan(a.replay, traces, lo, hi)
    print("| trace | setting | no OOM from | more OOMs with more capacity at | at 1.2x: "
          "reserved / requested, OOMs, chunk maps / unmaps, syncs |")
    print("|---|---|---|---|---|")
    for name in sorted(data["fixed"]):
        for setting in SETTINGS:
            runs = data[setting][name]
            first_ok, worse = summary(runs)
            r = runs.get(120)
            at = ("%.3f, %d, %d / %d, %d" % (r["fragmentation"], r["ooms"], r["chunk_maps"],
                                              r["chunk_unmaps"], r["device_syncs"])
                  if r else "-")
            print("| %s | %s | %s | %s | %s |" % (
                name.replace(".csv", ""), setting,
                "%.2fx" % (first_ok / 100.0) if first_ok else "none",
                ", ".join("%.2fx" % (p / 100.0) for p in worse) or "never", at))
    if a.svg:
        svg_chart(data, a.svg, lo, hi)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({s: {t: {str(p): {"ooms": r["ooms"], "fragmentation": r["fragmentation"]}
                               for p, r in runs.items()} for t, runs in d.items()}
                       for s, d in data.items()}, f)


if __name__ == "__main__":
    main()
