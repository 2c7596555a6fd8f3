#!/usr/bin/env python3
"""Host time per operation of two cachalot-replay builds on the same traces, interleaved.

  scripts/host_compare.py --after BUILD/tools/cachalot-replay --before OLD/tools/cachalot-replay \
      [--traces DIR] [--rounds 5] [--repeat 5] [--capacity-factor 1.2] [--config STR]

Each round replays every trace once with each binary (alternating which goes first), one thread,
no baseline, at the given capacity; each replay's ns/op is itself the median of --repeat passes.
Prints, per trace, the median over rounds of both, their ratio and the spread (min-max), and
checks issue 21's host targets: <= 60 ns/op on the single-stream training traces (after) and
after <= 1.05 x before on every trace. Timing on a shared machine is noise: run it on a quiet
one and say how quiet. Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

SINGLE_STREAM_TRAINING = ("cnn_training", "llm_training", "cnn_workspace_spike")


def ns_per_op(binary, trace, args):
    cmd = [binary, "--json", "--no-baseline", "--one-thread", "--repeat", str(args.repeat),
           "--capacity-factor", "%.2f" % args.capacity_factor]
    if args.config:
        cmd += ["--config", args.config]
    out = subprocess.run(cmd + [trace], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["ns_per_op"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--after", required=True)
    ap.add_argument("--before", required=True)
    ap.add_argument("--traces", default=os.path.join(here, "..", "bench", "traces"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--capacity-factor", type=float, default=1.2)
    ap.add_argument("--config", default="")
    args = ap.parse_args()
    traces = sorted(glob.glob(os.path.join(args.traces, "*.csv")))
    runs = {t: {"after": [], "before": []} for t in traces}
    for r in range(args.rounds):
        for t in traces:
            order = ("after", "before") if r % 2 == 0 else ("before", "after")
            for which in order:
                runs[t][which].append(ns_per_op(getattr(args, which), t, args))
    print("| trace | before ns/op (min-max) | after ns/op (min-max) | after / before | targets |")
    print("|---|---:|---:|---:|---|")
    for t in traces:
        name = os.path.basename(t)[:-4]
        b, a = runs[t]["before"], runs[t]["after"]
        mb, ma = statistics.median(b), statistics.median(a)
        checks = ["5 %: " + ("met" if ma <= 1.05 * mb else "MISSED")]
        if name in SINGLE_STREAM_TRAINING:
            checks.append("<= 60 ns: " + ("met" if ma <= 60 else "MISSED"))
        print("| %s | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2f | %s |" % (
            name, mb, min(b), max(b), ma, min(a), max(a), ma / mb, "; ".join(checks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
