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
        "Thread,Time,Action,Pointer,Size,Stream,Site",
        # the live set when the window began, by address: freed in the window (size from the
        # free), and allocated at the snapshot without an alloc in the window (from segments)
        "1,00:00:00.000000,allocate,0x%x,%d,0x1000,2" % (base + 30 * MiB, 1 * MiB),
        "1,00:00:00.000000,allocate,0x%x,%d,0x1000,3" % (base + 31 * MiB, 500 * 1000),
        "1,00:00:00.000010,allocate,0x%x,%d,0x1000,1" % (base, 4 * MiB),
        "1,00:00:00.000020,allocate,0x%x,%d,0x1000,1" % (base + 4 * MiB, 2 * MiB),
        "1,00:00:00.000040,allocate,0x%x,%d,0x2000,1" % (base + 64 * MiB, 3 * MiB),
        "1,00:00:00.000060,allocate,0x%x,%d,0x1000,1" % (base + 6 * MiB, 1 * MiB),
        # free_requested came before the 1 MiB allocation; the free is at free_completed
        "1,00:00:00.000070,free,0x%x,%d,0x1000," % (base, 4 * MiB),
        "1,00:00:00.000100,free,0x%x,%d,0x1000," % (base + 30 * MiB, 1 * MiB),
        "1,00:00:00.000110,allocate failure,(nil),%d,0x1000,1" % (50 * MiB),
        "1,00:00:00.000130,allocate,0x%x,%d,0x1000,1" % (base + 128 * MiB, 40 * MiB),
        "1,00:00:00.000150,free,0x%x,%d,0x1000," % (base + 128 * MiB, 40 * MiB),
        "1,00:00:00.000180,free,0x%x,%d,0x2000," % (base + 64 * MiB, 3 * MiB),
    ]
    assert r.counts == {"alloc": 5, "free_requested": 5, "free_completed": 4,
                        "segment_alloc": 2, "segment_free": 1, "segment_map": 1,
                        "segment_unmap": 1, "snapshot": 1, "oom": 1}
    assert r.reconstructed_freed == 1 and r.reconstructed_live == 1
    assert r.reconstructed_bytes == 1 * MiB + 500 * 1000
    assert r.pending_frees == 1 and r.live_at_end == 3
    assert r.streams == {0x1000, 0x2000}
    # reserved: 2 MiB before the window (the older segment), + 20 + 4 (map) + 40 = 66 MiB at
    # the peak; 24 MiB at the end = the segments' total
    assert r.segments_reserved == 24 * MiB
    assert r.reserved_at_start == 2 * MiB and not r.cold_start
    assert r.pytorch_peak_reserved == 66 * MiB and r.pytorch_peak_exact
    for line in ("# pytorch.peak_reserved: %d" % (66 * MiB), "# pytorch.peak_reserved_kind: exact",
                 "# pytorch.reserved_at_start: %d" % (2 * MiB),
                 "# pytorch.reserved_at_start_kind: exact",
                 "# pytorch.reconstructed_allocations: 2",
                 "# pytorch.reconstructed_bytes: %d" % (1 * MiB + 500 * 1000),
                 "# site 1: train.py:12 forward", "# site 2: (freed at) train.py:12 forward",
                 "# site 3: model.py:7 load"):
        assert line in r.lines


def test_reconstructed_allocations_are_marked_between_comments(every_kind):
    lines = cv.convert(cv.load_snapshot(str(every_kind))).lines
    first = lines.index("# reconstructed: the 2 allocations below (1548576 bytes) were live when "
                        "the recorded window began")
    assert lines[first - 1] == "Thread,Time,Action,Pointer,Size,Stream,Site"
    assert lines[first + 3] == "# the recorded window begins"


def test_live_bytes_at_the_end_equal_the_snapshots_allocated_blocks(every_kind):
    r = cv.convert(cv.load_snapshot(str(every_kind)))
    # held at the snapshot: 2 MiB pending free, 1 MiB and the 500,000-byte weights allocated
    assert r.requested_at_snapshot == 3 * MiB + 500 * 1000
    assert r.allocated_at_snapshot == 3 * MiB + 512 * 1024  # rounded block sizes
    assert r.live_bytes_at_end == r.requested_at_snapshot
    assert r.size_mismatches == 0 and r.not_in_segments == 0
    assert "the trace's live bytes at its end equal them" in r.summary()


def test_a_trace_the_segments_contradict_is_reported():
    snap = sm.every_kind_snapshot()
    blocks = snap["segments"][0]["blocks"]
    blocks[2]["requested_size"] = 7  # the 1 MiB block: another size than the trace's
    del blocks[1]                    # the pending free: absent from the segments
    r = cv.convert(snap)
    assert r.size_mismatches == 1 and r.not_in_segments == 1
    assert "MISMATCH" in r.summary()


def test_a_second_free_without_an_alloc_between_is_skipped_not_reconstructed():
    events = [sm.event("alloc", 0x1000, 512), sm.event("free_completed", 0x1000, 512),
              sm.event("free_completed", 0x1000, 512),      # freed again
              sm.event("free_completed", 0x9000, 256),      # allocated before the window
              sm.event("free_completed", 0x9000, 256)]      # and freed twice
    r = cv.convert({"device_traces": [events]})
    assert r.double_frees == 2 and r.reconstructed_freed == 1
    assert [line.split(",")[2:4] for line in data_lines(r)[1:]] == [
        ["allocate", "0x9000"], ["allocate", "0x1000"], ["free", "0x1000"], ["free", "0x9000"]]
    assert "frees of addresses already freed in the window (skipped): 2" in r.summary()


def test_cold_start_and_no_segment_list():
    events = [sm.event("segment_alloc", 0x1000, 2 * MiB), sm.event("alloc", 0x1000, 512),
              sm.event("free_requested", 0x1000, 512), sm.event("free_completed", 0x1000, 512)]
    snap = {"segments": [{"device": 0, "address": 0x1000, "total_size": 2 * MiB, "stream": 0,
                          "blocks": [sm.block(0x1000, 2 * MiB, "inactive")]}],
            "device_traces": [events]}
    r = cv.convert(snap)
    assert r.cold_start and r.reserved_at_start == 0 and r.reconstructed == 0
    assert "a cold start" in r.summary()
    # without the segment list the start is only a lower bound: never called a cold start
    del snap["segments"]
    r = cv.convert(snap)
    assert not r.cold_start and r.requested_at_snapshot is None
    assert "# pytorch.reserved_at_start_kind: lower-bound" in r.lines


def test_device_choice(every_kind):
    snap = cv.load_snapshot(str(every_kind))
    r = cv.convert(snap, device=0)
    assert data_lines(r)[1:] == ["1,00:00:00.000001,allocate,0x10000,512,0x0,1"]
    assert r.pytorch_peak_reserved == 2 * MiB and r.pytorch_peak_exact and r.cold_start
    with pytest.raises(cv.SnapshotError, match="devices 0..1"):
        cv.convert(snap, device=2)


def test_without_frames_the_trace_has_no_site_column():
    snap = {"device_traces": [[sm.event("alloc", 0x1000, 512, frames=[])]]}
    assert data_lines(cv.convert(snap)) == ["Thread,Time,Action,Pointer,Size,Stream",
                                            "1,00:00:00.000000,allocate,0x1000,512,0x0"]


@pytest.mark.parametrize("frames,site", [
    ([{"filename": "??", "name": "torch::unwind::unwind()", "line": 0},
      {"filename": "/venv/lib/python3.12/site-packages/torch/functional.py", "name": "einsum",
       "line": 407},
      {"filename": "/home/me/job/model.py", "name": "forward", "line": 54},
      {"filename": "/home/me/job/train.py", "name": "main", "line": 9}],
     "/home/me/job/model.py:54 forward"),
    ([{"filename": "/usr/lib/python3.11/runpy.py", "name": "_run_code", "line": 86},
      {"filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
       "name": "_call_impl", "line": 1790}],
     "/usr/lib/python3.11/runpy.py:86 _run_code"),  # only library frames: the innermost
    ([{"filename": "??", "name": "c10::cuda::CUDACachingAllocator::malloc()", "line": 0},
      {"filename": "??", "name": "torch::autograd::generated::DivBackward0::apply(std::vector"
                                 "<at::Tensor>&&)", "line": 0},
      {"filename": "??", "name": "torch::autograd::Engine::thread_main()", "line": 0}],
     "(autograd) DivBackward0"),  # the backward pass runs in C++ threads
    ([{"filename": "??", "name": "clone", "line": 0}], None),
    ("not a list", None),
], ids=["user", "library_only", "autograd", "no_python", "malformed"])
def test_innermost_user_frame(frames, site):
    from cachalot import _frames
    frame = _frames.user_frame(frames)
    assert (None if frame is None else _frames.site_text(frame)) == site


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
    assert ("live set at the window's start (reconstructed, allocated at its start): 2 "
            "allocations, 1548576 bytes (1 freed in the window" in p.stderr)
    assert "PyTorch reserved at the window's start: %d bytes (exact" % (2 * MiB) in p.stderr
    assert "PyTorch peak reserved: %d bytes (exact" % (66 * MiB) in p.stderr
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


def replay_json(tool, trace, *args):
    p = subprocess.run([tool, "--repeat", "1", "--json", *args, str(trace)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_converted_trace_replays_with_pytorch_figure_only_when_comparable(every_kind, tmp_path):
    tool = replay_binary()
    out = tmp_path / "t.csv"
    assert run_convert(every_kind, "-o", out, "-q").returncode == 0
    p = subprocess.run([tool, "--repeat", "1", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    # PyTorch had 2 MiB reserved before the window: its 66 MiB peak is not set beside cachalot's
    assert ("PyTorch's recorded peak reserved (66.00 MiB) is not comparable: PyTorch had 2.00 MiB "
            "reserved before the recorded window began" in p.stdout)
    assert "PyTorch's peak minus what it had reserved before the window: 64.00 MiB" in p.stdout
    assert "cachalot: " not in p.stdout
    assert ("live set when the recorded window began: 2 allocations, 1.48 MiB (reconstructed"
            in p.stdout)
    assert "1 recorded allocation failures" in p.stdout
    assert "at the trace's live peak, held by:" in p.stdout
    r = replay_json(tool, out)
    assert r["pytorch_comparable"] is False and "pytorch_peak_reserved_bytes" not in r
    assert r["pytorch_recorded_peak_reserved_bytes"] == 66 * MiB
    assert r["pytorch_reserved_at_start_bytes"] == 2 * MiB
    assert r["pytorch_peak_minus_start_bytes"] == 64 * MiB
    assert "2.00 MiB reserved before the recorded window began" in r["pytorch_not_comparable"]
    assert r["reconstructed_allocations"] == 2 and r["reconstructed_bytes"] == 1548576
    assert r["ops"] == 11 and r["streams"] == 2 and r["complete"] is True
    assert r["trace_live_at_end_bytes"] == 3 * MiB + 500 * 1000
    # 1 + 0.48 (reconstructed) + 4 + 2 + 3 + 1 MiB live after the fourth allocation; then 40 MiB
    assert r["peak_requested_bytes"] == 46 * MiB + 500 * 1000
    assert r["peak_holders"][0] == {"site": "train.py:12 forward", "bytes": 46 * MiB,
                                    "allocations": 4}
    # device 0 is a cold start: PyTorch's peak stands beside cachalot's
    assert run_convert(every_kind, "-o", out, "-q", "--device", "0").returncode == 0
    r = replay_json(tool, out)
    assert r["pytorch_comparable"] is True and r["pytorch_peak_reserved_bytes"] == 2 * MiB
    p = subprocess.run([tool, "--repeat", "1", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert ("PyTorch reserved at its peak (from the snapshot, a cold start): 2.00 MiB; "
            "cachalot: " in p.stdout)
