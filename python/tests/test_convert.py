"""The PyTorch snapshot converter (cachalot.convert) on hand-made snapshots (snapshot_maker.py),
bad inputs, and the converted trace replayed by cachalot-replay (when the build has it)."""
import json
import os
import pickle
import subprocess
import sys

import pytest

import snapshot_maker as sm
from cachalot import convert as cv

MiB = 1 << 20


def run_convert(*args):
    """Runs `python -m cachalot.convert` in a child; returns the CompletedProcess."""
    env = dict(os.environ)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(cv.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "cachalot.convert", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def replay_binary():
    build = os.environ.get("CACHALOT_BUILD_DIR")
    path = os.path.join(build, "tools", "cachalot-replay") if build else None
    if not path or not os.path.exists(path):
        pytest.skip("cachalot-replay is not built (CACHALOT_BUILD_DIR, set by CTest)")
    return path


@pytest.fixture
def every_kind(tmp_path):
    path = tmp_path / "snap.pickle"
    sm.write(path, sm.every_kind_snapshot())
    return path


def data_lines(result):
    return [line for line in result.lines if not line.startswith("#")]


def test_every_event_kind_two_streams(every_kind):
    r = cv.convert(cv.load_snapshot(str(every_kind)))
    assert r.device == 1  # the device with the most events
    base = 0x7F0000000000
    assert data_lines(r) == [
        "Thread,Time,Action,Pointer,Size,Stream",
        "1,00:00:00.000010,allocate,0x%x,%d,0x1000" % (base, 4 * MiB),
        "1,00:00:00.000020,allocate,0x%x,%d,0x1000" % (base + 4 * MiB, 2 * MiB),
        "1,00:00:00.000040,allocate,0x%x,%d,0x2000" % (base + 64 * MiB, 3 * MiB),
        "1,00:00:00.000060,allocate,0x%x,%d,0x1000" % (base + 6 * MiB, 1 * MiB),
        # free_requested came before the 1 MiB allocation; the free is at free_completed
        "1,00:00:00.000070,free,0x%x,%d,0x1000" % (base, 4 * MiB),
        "1,00:00:00.000110,allocate failure,(nil),%d,0x1000" % (50 * MiB),
        "1,00:00:00.000130,allocate,0x%x,%d,0x1000" % (base + 128 * MiB, 40 * MiB),
        "1,00:00:00.000150,free,0x%x,%d,0x1000" % (base + 128 * MiB, 40 * MiB),
        "1,00:00:00.000180,free,0x%x,%d,0x2000" % (base + 64 * MiB, 3 * MiB),
    ]
    assert r.counts == {"alloc": 5, "free_requested": 5, "free_completed": 4,
                        "segment_alloc": 2, "segment_free": 1, "segment_map": 1,
                        "segment_unmap": 1, "snapshot": 1, "oom": 1}
    assert r.unknown_frees == 1 and r.pending_frees == 1 and r.live_at_end == 2
    assert r.streams == {0x1000, 0x2000}
    # reserved: 20 + 4 (map) + 40 = 64 MiB at the peak; 22 MiB at the end = the segments' total
    assert r.segments_reserved == 22 * MiB
    assert r.pytorch_peak_reserved == 64 * MiB and r.pytorch_peak_exact
    assert "# pytorch.peak_reserved: %d" % (64 * MiB) in r.lines
    assert "# pytorch.peak_reserved_kind: exact" in r.lines


def test_device_choice(every_kind):
    snap = cv.load_snapshot(str(every_kind))
    r = cv.convert(snap, device=0)
    assert data_lines(r)[1:] == ["1,00:00:00.000001,allocate,0x10000,512,0x0"]
    assert r.pytorch_peak_reserved == 2 * MiB and r.pytorch_peak_exact
    with pytest.raises(cv.SnapshotError, match="devices 0..1"):
        cv.convert(snap, device=2)


def test_older_segments_make_a_lower_bound():
    # no segment list; a segment older than the trace is freed: the start holds at least it
    snap = {"device_traces": [[sm.event("segment_free", 0x1000, 8 * MiB),
                               sm.event("segment_alloc", 0x9000000, 2 * MiB)]]}
    r = cv.convert(snap)
    assert r.segments_reserved is None and not r.pytorch_peak_exact
    assert r.pytorch_peak_reserved == 8 * MiB
    assert "# pytorch.peak_reserved_kind: lower-bound" in r.lines


def test_command_line_writes_the_trace_and_a_summary(every_kind, tmp_path):
    out = tmp_path / "t.csv"
    p = run_convert(every_kind, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "frees of addresses not allocated in the trace (skipped): 1" in p.stderr
    assert "PyTorch peak reserved: %d bytes (exact" % (64 * MiB) in p.stderr
    assert out.read_text().splitlines() == cv.convert(cv.load_snapshot(str(every_kind))).lines
    p = run_convert(every_kind, "-o", out, "--device", "7")
    assert p.returncode == 2 and "--device 7" in p.stderr


@pytest.mark.parametrize("content,message", [
    (b"", "empty file"),
    (b"Thread,Time,Action\n", "not a pickle"),
    (pickle.dumps([1, 2, 3]), "a pickle of a list, not a PyTorch memory snapshot"),
    (pickle.dumps({"segments": []}), "no 'device_traces'"),
    (pickle.dumps({"device_traces": [[]]}), "no trace events"),
    (pickle.dumps({"device_traces": [[{"action": "alloc", "addr": -1, "size": 3,
                                       "stream": 0}]]}), "field 'addr' is -1"),
    (pickle.dumps({"device_traces": 5}), "not a list of per-device event lists"),
    (pickle.dumps(sm.every_kind_snapshot())[:-40], "truncated pickle"),
    (pickle.dumps(ValueError("x")), "names builtins.ValueError"),
], ids=["empty", "text", "list", "no_traces", "no_events", "negative_addr", "traces_not_list",
        "truncated", "class"])
def test_bad_inputs_fail_with_a_message_and_exit_2(tmp_path, content, message):
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    p = run_convert(path, "-o", tmp_path / "out.csv")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "cachalot.convert: error: %s: " % path in p.stderr
    assert message in p.stderr
    assert not (tmp_path / "out.csv").exists()  # nothing half-written


def test_missing_file_and_unwritable_output(tmp_path, every_kind):
    p = run_convert(tmp_path / "nope.pickle", "-o", tmp_path / "out.csv")
    assert p.returncode == 2 and "cannot read" in p.stderr
    p = run_convert(every_kind, "-o", tmp_path / "no_dir" / "out.csv")
    assert p.returncode == 2 and "cannot write" in p.stderr


def test_converted_trace_replays_with_pytorch_figure(every_kind, tmp_path):
    tool = replay_binary()
    out = tmp_path / "t.csv"
    assert run_convert(every_kind, "-o", out, "-q").returncode == 0
    p = subprocess.run([tool, "--repeat", "1", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "PyTorch reserved at its peak (from the snapshot): 64.00 MiB;" in p.stdout
    assert "1 recorded allocation failures" in p.stdout
    p = subprocess.run([tool, "--repeat", "1", "--json", str(out)], capture_output=True,
                       text=True, timeout=120)
    r = json.loads(p.stdout)
    assert r["pytorch_peak_reserved_bytes"] == 64 * MiB and r["pytorch_peak_exact"] is True
    assert r["ops"] == 8 and r["streams"] == 2 and r["complete"] is True
    # 4+2+3+1 MiB live after the first three allocations and the 1 MiB one; then 40 MiB
    assert r["peak_requested_bytes"] == 46 * MiB
