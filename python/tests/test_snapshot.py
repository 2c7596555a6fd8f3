"""memory_snapshot() in the layout of torch.cuda.memory_snapshot(), and dump_snapshot() writing
the pickle that PyTorch's memory viewer opens: the dict it reads (segments with device,
address, total_size, stream and blocks with size, requested_size and state; device_traces
indexed by device), pickled with protocol 2-4 opcodes that MemoryViz.js's unpickler knows."""
import pickle
import pickletools

from conftest import MiB, run_python

SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
                "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}

# The opcodes torch/utils/viz/MemoryViz.js's unpickle() handles (it throws on any other).
VIEWER_OPCODES = {
    "PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "MARK",
    "STOP", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE", "TUPLE1",
    "TUPLE2", "TUPLE3", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "NONE", "NEWTRUE",
    "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "SHORT_BINUNICODE",
    "BINUNICODE",
}


def populate(allocator):
    """Three segments: a small one on the default stream (a live 1000 B block), a large one
    (a live 3 MiB block), and a small one on stream 0x100 whose block awaits stream 0x200."""
    small = allocator.malloc(1000)
    large = allocator.malloc(3 * MiB)
    pending = allocator.malloc(4096, stream=0x100)
    allocator.record_stream(pending, 0x200)
    allocator.free(pending, stream=0x100)
    return small, large, pending


def check_segments(segments, small, large, pending, device=0):
    assert len(segments) == 3
    assert [s["address"] for s in segments] == sorted(s["address"] for s in segments)
    for seg in segments:
        assert set(seg) == SEGMENT_KEYS
        assert seg["device"] == device
        assert seg["segment_pool_id"] == (0, 0) and seg["is_expandable"] is False
        assert seg["total_size"] == sum(b["size"] for b in seg["blocks"])
        addr = seg["address"]
        for b in seg["blocks"]:
            assert set(b) == BLOCK_KEYS
            assert b["address"] == addr, "blocks cover the segment in address order"
            addr += b["size"]
    by_block = {b["address"]: (seg, b) for seg in segments for b in seg["blocks"]}
    seg, b = by_block[small]
    assert (seg["segment_type"], seg["stream"], seg["total_size"]) == ("small", 0, 2 * MiB)
    assert (b["size"], b["requested_size"], b["state"]) == (1024, 1000, "active_allocated")
    assert (seg["allocated_size"], seg["active_size"], seg["requested_size"]) == (1024, 1024, 1000)
    seg, b = by_block[large]
    assert (seg["segment_type"], seg["total_size"]) == ("large", 20 * MiB)
    assert (b["size"], b["state"]) == (3 * MiB, "active_allocated")
    assert seg["blocks"][1]["state"] == "inactive" and seg["blocks"][1]["requested_size"] == 0
    seg, b = by_block[pending]
    assert (seg["segment_type"], seg["stream"]) == ("small", 0x100)
    assert b["state"] == "active_pending_free"
    assert (seg["allocated_size"], seg["active_size"]) == (0, 4096)


def test_memory_snapshot_layout(allocator):
    small, large, pending = populate(allocator)
    check_segments(allocator.memory_snapshot(), small, large, pending)


def check_viewer_pickle(path, device=0):
    raw = open(path, "rb").read()
    ops = [op.name for op, _, _ in pickletools.genops(raw)]
    assert ops[0] == "PROTO" and 2 <= raw[1] <= 4
    assert set(ops) <= VIEWER_OPCODES, set(ops) - VIEWER_OPCODES
    snap = pickle.loads(raw)
    assert set(snap) == {"segments", "device_traces"}
    assert len(snap["device_traces"]) == device + 1
    assert all(trace == [] for trace in snap["device_traces"])
    # What the viewer's device selector and views need (MemoryViz.js, snapshot_change,
    # annotate_snapshot, process_alloc_data): a trace list for each segment's device.
    for seg in snap["segments"]:
        assert seg["device"] < len(snap["device_traces"])
    return snap


def test_dump_snapshot_is_what_memory_viz_reads(allocator, tmp_path):
    small, large, pending = populate(allocator)
    path = tmp_path / "snap.pickle"
    allocator.dump_snapshot(str(path))
    snap = check_viewer_pickle(path)
    check_segments(snap["segments"], small, large, pending)
    assert snap == allocator.snapshot()


def test_default_allocator_snapshots_every_device(tmp_path):
    path = tmp_path / "default.pickle"
    run_python(f"""
        import ctypes, cachalot
        from cachalot import _lib
        from test_snapshot import check_segments, check_viewer_pickle
        lib = _lib.load()
        def malloc(device, size, stream=0):
            out = ctypes.c_void_p()
            _lib.check(lib.cachalot_default_malloc(device, ctypes.byref(out), size, stream))
            return out.value
        small = malloc(2, 1000)
        large = malloc(2, 3 << 20)
        pending = malloc(2, 4096, 0x100)
        _lib.check(lib.cachalot_default_record_stream(pending, 0x200))
        _lib.check(lib.cachalot_default_free(2, pending, 0, 0x100))
        assert cachalot.memory_snapshot() == cachalot.memory_snapshot(2)
        check_segments(cachalot.memory_snapshot(), small, large, pending, device=2)
        assert cachalot.memory_snapshot(0) == []  # created by the query, empty
        cachalot.dump_snapshot({str(path)!r})
        snap = check_viewer_pickle({str(path)!r}, device=2)
        check_segments(snap["segments"], small, large, pending, device=2)
    """, CACHALOT_LOG="off")
