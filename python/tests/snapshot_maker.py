"""Hand-made PyTorch memory snapshots for the converter tests (no PyTorch runs in CI).

The dicts follow the keys PyTorch writes (torch/csrc/cuda/memory_snapshot.cpp; see
cachalot/convert.py): device_traces (per device, events with action, addr, size, stream,
time_us, frames; oom events carry device_free instead of addr), segments and
allocator_settings.
"""
import pickle

MiB = 1 << 20

FRAMES = [{"filename": "train.py", "name": "forward", "line": 12}]


def event(action, addr, size, stream=0, time_us=0, frames=None):
    e = {"action": action, "size": size, "stream": stream, "time_us": time_us,
         "frames": FRAMES if frames is None else frames}
    if action == "oom":
        e["device_free"] = addr
    else:
        e["addr"] = addr
    return e


def block(address, size, state, requested=None, frames=None):
    return {"address": address, "size": size, "requested_size": size if requested is None
            else requested, "state": state, "frames": frames or []}


def every_kind_snapshot():
    """Device 1 has the main trace (every event kind, two streams, a free completed later than
    requested, a free of an address allocated before recording, a pending free); device 0 has a
    shorter one. Segments at the end, their blocks consistent with the trace: on device 1 one
    20 MiB segment, one mapped 2 MiB range and a 2 MiB segment reserved before recording began,
    which holds the block freed without having been allocated in the trace and a block allocated
    before recording and never freed (the weights of a model); on device 0 a 2 MiB segment.
    """
    s1, s2 = 0x1000, 0x2000
    base = 0x7F0000000000
    t = iter(range(1000, 100000, 10))
    dev1 = [
        event("segment_alloc", base, 20 * MiB, s1, next(t)),
        event("alloc", base, 4 * MiB, s1, next(t)),
        event("alloc", base + 4 * MiB, 2 * MiB, s1, next(t)),
        event("segment_map", base + 64 * MiB, 4 * MiB, s2, next(t)),
        event("alloc", base + 64 * MiB, 3 * MiB, s2, next(t)),
        # freed on s1 while s2 still uses it (record_stream): completed after other events
        event("free_requested", base, 4 * MiB, s1, next(t)),
        event("alloc", base + 6 * MiB, 1 * MiB, s1, next(t)),
        event("free_completed", base, 4 * MiB, s1, next(t)),
        event("snapshot", 0, 0, 0, next(t)),
        # allocated before recording began
        event("free_requested", base + 30 * MiB, 1 * MiB, s1, next(t)),
        event("free_completed", base + 30 * MiB, 1 * MiB, s1, next(t)),
        event("oom", 123 * MiB, 50 * MiB, s1, next(t)),
        event("segment_alloc", base + 128 * MiB, 40 * MiB, s1, next(t)),
        event("alloc", base + 128 * MiB, 40 * MiB, s1, next(t)),
        event("free_requested", base + 128 * MiB, 40 * MiB, s1, next(t)),
        event("free_completed", base + 128 * MiB, 40 * MiB, s1, next(t)),
        event("segment_free", base + 128 * MiB, 40 * MiB, s1, next(t)),
        event("free_requested", base + 64 * MiB, 3 * MiB, s2, next(t)),
        event("free_completed", base + 64 * MiB, 3 * MiB, s2, next(t)),
        event("segment_unmap", base + 64 * MiB, 2 * MiB, s2, next(t)),
        # pending at the snapshot: requested, never completed
        event("free_requested", base + 4 * MiB, 2 * MiB, s1, next(t)),
    ]
    dev0 = [event("segment_alloc", 0x10000, 2 * MiB, 0, 5),
            event("alloc", 0x10000, 512, 0, 6)]
    weights_frames = [{"filename": "/usr/lib/python3/dist-packages/torch/nn/modules/module.py",
                       "name": "to", "line": 1340},
                      {"filename": "model.py", "name": "load", "line": 7}]
    segments = [
        {"device": 1, "address": base, "total_size": 20 * MiB, "stream": s1,
         "segment_type": "large", "is_expandable": False,
         "blocks": [block(base, 4 * MiB, "inactive"),
                    block(base + 4 * MiB, 2 * MiB, "active_pending_free"),
                    block(base + 6 * MiB, 1 * MiB, "active_allocated"),
                    block(base + 7 * MiB, 13 * MiB, "inactive")]},
        {"device": 1, "address": base + 30 * MiB, "total_size": 2 * MiB, "stream": s1,
         "segment_type": "large", "is_expandable": False,
         "blocks": [block(base + 30 * MiB, 1 * MiB, "inactive"),
                    block(base + 31 * MiB, 512 * 1024, "active_allocated", 500 * 1000,
                          weights_frames),
                    block(base + 31 * MiB + 512 * 1024, 512 * 1024, "inactive")]},
        {"device": 1, "address": base + 64 * MiB, "total_size": 2 * MiB, "stream": s2,
         "segment_type": "large", "is_expandable": True,
         "blocks": [block(base + 64 * MiB, 2 * MiB, "inactive")]},
        {"device": 0, "address": 0x10000, "total_size": 2 * MiB, "stream": 0,
         "segment_type": "small", "is_expandable": False,
         "blocks": [block(0x10000, 512, "active_allocated"),
                    block(0x10200, 2 * MiB - 512, "inactive")]},
    ]
    return {"segments": segments, "device_traces": [dev0, dev1],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1}}


def fragmenting_snapshot(rounds=40):
    """A job whose replay needs more than the defaults' memory: growing 33 MiB .. 52 MiB
    activations freed in between by smaller ones (no segment events: PyTorch's figure is 0)."""
    events = []
    addr = 0x7F0000000000
    live = []
    step = 0
    for r in range(rounds):
        size = (33 + r % 20) * MiB + 4096
        for k in range(3):
            a = addr + step * 128 * MiB
            step += 1
            events.append(event("alloc", a, size + k * MiB, 0, step))
            live.append((a, size + k * MiB))
        while len(live) > 4:
            a, s = live.pop(0)
            events.append(event("free_requested", a, s, 0, step))
            events.append(event("free_completed", a, s, 0, step))
    return {"segments": [], "device_traces": [events]}


def write(path, snap):
    with open(path, "wb") as f:
        pickle.dump(snap, f)


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 2:
        sys.exit("usage: snapshot_maker.py OUT.pickle   (writes every_kind_snapshot())")
    write(sys.argv[1], every_kind_snapshot())
