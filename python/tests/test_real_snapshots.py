"""Real PyTorch snapshots, taken on GPUs by their authors (the project's shared test data,
../shared/real-snapshots: eleven pickles in a tarball, unpacked here into a temporary folder; the
tests skip where the tarball is absent). Every one converts with its live set reconstructed: the
replayed trace's live bytes at its end equal the snapshot's allocated bytes; PyTorch's figure is
comparable only for the cold-start one; its report prints. When PyTorch's own allocator is built
(cachalot-pytorch-replay, tools/pytorch_peer), its replay of the cold-start snapshot reserves
exactly the peak PyTorch recorded on the GPU, segment for segment.

CACHALOT_REAL_SNAPSHOTS overrides the tarball's path."""
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile

import pytest

from cachalot import _replaytools as rt
from cachalot import convert as cv
from cachalot import report

MiB = 1 << 20
GiB = 1 << 30
TARBALL = os.environ.get("CACHALOT_REAL_SNAPSHOTS",
                         "/work/shared/real-snapshots/snapshots.tar.xz")
NAMES = ["Wedsonlin_medium_%d_%s_memory_snapshot.pickle" % (n, kind)
         for n in (128, 256, 512, 1024) for kind in ("inference", "training")] + \
        ["silmont2000_mem_snapshot.pickle", "silmont2000_memory_forward_bf16_128.pickle",
         "silmont2000_memory_forward_fp32_128.pickle"]
COLD = "silmont2000_mem_snapshot.pickle"


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory):
    """The folder the tarball is unpacked into (read-only source, never written)."""
    if not os.path.exists(TARBALL):
        pytest.skip("no real snapshots here (%s; CACHALOT_REAL_SNAPSHOTS)" % TARBALL)
    folder = tmp_path_factory.mktemp("real_snapshots")
    with tarfile.open(TARBALL) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and ".." not in m.name]
        tar.extractall(folder, members=members)
    return {os.path.basename(m.name): str(folder / m.name) for m in members
            if m.name.endswith(".pickle")}


@pytest.fixture(scope="session")
def converted(snapshots, tmp_path_factory):
    """name -> (ConversionResult, trace path)."""
    folder = tmp_path_factory.mktemp("real_traces")
    out = {}
    for name, path in snapshots.items():
        r = cv.convert(cv.load_snapshot(path))
        trace = folder / name.replace(".pickle", ".csv")
        trace.write_text("\n".join(r.lines) + "\n")
        out[name] = (r, str(trace))
    return out


def held_blocks(snap, device):
    return [b for s in snap["segments"] if s.get("device", device) == device
            for b in s["blocks"] if b["state"] in ("active_allocated", "active_pending_free")]


def test_the_tarball_holds_the_eleven_snapshots(snapshots):
    assert sorted(snapshots) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_converts_with_the_live_set_reconstructed(snapshots, converted, name):
    snap = cv.load_snapshot(snapshots[name])
    r, trace = converted[name]
    blocks = held_blocks(snap, r.device)
    assert r.requested_at_snapshot == sum(b["requested_size"] for b in blocks)
    assert r.allocated_at_snapshot == sum(b["size"] for b in blocks)
    # the trace ends with exactly the snapshot's allocated blocks live
    assert r.live_bytes_at_end == r.requested_at_snapshot
    assert r.live_at_end == len(blocks)
    assert r.size_mismatches == 0 and r.not_in_segments == 0
    assert r.cold_start == (name == COLD)
    if name == COLD:
        assert r.reconstructed == 0 and r.reserved_at_start == 0
    else:
        # the windows start in the middle of the runs: the weights (and in training the
        # optimizer state and gradients) were live before them
        assert r.reconstructed > 0 and r.reserved_at_start > 0
    assert r.sites > 0  # the snapshots have stack frames


@pytest.mark.parametrize("name", NAMES)
def test_replayed_live_bytes_at_the_end_equal_the_snapshots(converted, name, replay_tool):
    tool = replay_tool
    r, trace = converted[name]
    p = subprocess.run([tool, "--json", "--repeat", "1", "--no-baseline", "--one-thread",
                        "--capacity", "80GiB", trace], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["complete"] is True
    assert doc["trace_live_at_end_bytes"] == r.requested_at_snapshot
    assert doc["reconstructed_allocations"] == r.reconstructed
    assert doc["pytorch_comparable"] is (name == COLD)
    assert doc["pytorch_recorded_peak_reserved_bytes"] == r.pytorch_peak_reserved
    assert doc["pytorch_reserved_at_start_bytes"] == r.reserved_at_start
    assert doc["peak_holders"], "the snapshots have frames: the report names the code"


def test_the_1024_token_inference_window_is_not_compared_with_pytorchs_earlier_peak(converted,
                                                                                   replay_tool):
    # the example: 2.98 GiB reserved by PyTorch, mostly before the window; its live
    # peak with the weights is 2.68 GiB
    r, trace = converted["Wedsonlin_medium_1024_inference_memory_snapshot.pickle"]
    assert r.reserved_at_start == r.pytorch_peak_reserved == 3204448256
    p = subprocess.run([replay_tool, "--repeat", "1", "--no-baseline", trace], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "PyTorch's recorded peak reserved (2.98 GiB) is not comparable" in p.stdout
    assert "peak minus what it had reserved before the window: 0 B" in p.stdout
    assert "cachalot: " not in p.stdout


@pytest.mark.parametrize("name", NAMES)
def test_the_report_prints(snapshots, name, tmp_path, replay_tool):
    out = io.StringIO()
    svg = tmp_path / "r.svg"
    assert report.main([snapshots[name], "--svg", str(svg)], out=out) == 0
    text = out.getvalue()
    for part in ("cachalot report: %s" % name, "live peak (requested bytes):",
                 "PyTorch on the GPU (recorded): peak reserved", "cachalot, defaults",
                 "cachalot, recommended", "smallest device", "device calls",
                 "device time (modeled)", "recommended: CACHALOT_CONF=",
                 "at the live peak, held by:", "chart: %s" % svg):
        assert part in text, (part, text)
    assert ("a cold start" in text) == (name == COLD)
    assert len(text.splitlines()) <= 30, "one screen"
    doc = svg.read_text()
    assert doc.startswith("<?xml") and doc.rstrip().endswith("</svg>")
    for label in ("PyTorch reserved (recorded on the GPU)", "cachalot reserved, defaults",
                  "live (requested) bytes"):
        assert label in doc


def test_a_bad_pickle_keeps_its_exit_2_message(tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps([1, 2]))
    err = subprocess.run([sys.executable, "-m", "cachalot.report", str(bad)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(
                             os.path.dirname(os.path.abspath(cv.__file__)))))
    assert err.returncode == 2
    assert "cachalot.report: error: %s: a pickle of a list" % bad in err.stderr


def test_pytorchs_own_allocator_reserves_the_recorded_peak_from_a_cold_start(snapshots, converted,
                                                                             pytorch_tool):
    tool = pytorch_tool
    r, trace = converted[COLD]
    snap = cv.load_snapshot(snapshots[COLD])
    recorded = [e["size"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    f = rt.pytorch_run(tool, trace, 80 * GiB)
    assert f.complete
    assert f.peak_reserved == r.pytorch_peak_reserved == 3781165056
    assert f.doc["segment_sizes"] == recorded  # cudaMalloc for cudaMalloc
    assert f.doc["end_reserved_bytes"] == r.segments_reserved
    assert f.doc["end_allocated_bytes"] == r.allocated_at_snapshot


@pytest.mark.parametrize("name", NAMES)
def test_pytorchs_replay_ends_with_the_snapshots_requested_bytes(converted, name, pytorch_tool):
    tool = pytorch_tool
    r, trace = converted[name]
    f = rt.pytorch_run(tool, trace, 80 * GiB)
    assert f.complete and f.doc["error"] is None
    assert f.doc["end_requested_bytes"] == r.requested_at_snapshot
