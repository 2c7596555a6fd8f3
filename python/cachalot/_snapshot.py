"""cachalot's snapshots in the layout of PyTorch's, and the pickle that PyTorch's memory viewer
(pytorch.org/memory_viz, torch/utils/viz/MemoryViz.js) opens.

Layout read from PyTorch's torch/csrc/cuda/memory_snapshot.cpp (_memory_snapshot_pickled) and
torch/cuda/memory.py (_snapshot, _dump_snapshot): a dict with "segments" and "device_traces".
A segment has device, address, total_size, allocated_size, active_size, requested_size,
stream, segment_type ("small"/"large"), segment_pool_id, is_expandable, frames and blocks; a
block has address, size, requested_size, state and frames. States are "active_allocated",
"active_pending_free" (what the C++ writes and the viewer reads; memory.py's docstring says
"active_awaiting_free") and "inactive". cachalot records no allocation history and no stack
frames, so "device_traces" has one empty list per device and every "frames" is empty: the
viewer shows the state at the time of the snapshot.

The viewer's own unpickler reads protocols 2 to 4 and a fixed set of opcodes (no bytes
objects); the file is written with protocol 4 from ints, strings, bools, tuples, lists and
dicts only, which stay within that set.
"""
import json
import pickle

PICKLE_PROTOCOL = 4

_STATES = {"allocated": "active_allocated", "pending": "active_pending_free",
           "free": "inactive"}


def _mapped_runs(blocks):
    """The runs of consecutive mapped blocks of a segment (holes of an expandable segment,
    state "unmapped", separate runs and hold no memory)."""
    run = []
    for b in blocks:
        if b["state"] == "unmapped":
            if run:
                yield run
            run = []
        else:
            run.append(b)
    if run:
        yield run


def segments_from_json(text):
    """Segments in torch.cuda.memory_snapshot() layout from cachalot's JSON snapshot. An
    expandable segment becomes one segment per run of mapped memory, with is_expandable set,
    as PyTorch reports the mapped parts of its own expandable segments."""
    doc = json.loads(text)
    device = doc["device"]
    segments = []
    for seg in doc["segments"]:
        expandable = seg.get("expandable", False)
        for run in _mapped_runs(seg["blocks"]):
            blocks = []
            allocated = active = requested = 0
            for b in run:
                state = _STATES[b["state"]]
                blocks.append({"address": b["address"], "size": b["size"],
                               "requested_size": b["requested"], "state": state, "frames": []})
                if state == "active_allocated":
                    allocated += b["size"]
                if state != "inactive":
                    active += b["size"]
                    requested += b["requested"]
            segments.append({
                "device": device,
                "address": run[0]["address"],
                "total_size": sum(b["size"] for b in run) if expandable else seg["size"],
                "allocated_size": allocated,
                "active_size": active,
                "requested_size": requested,
                "stream": seg["stream"],
                "segment_type": seg["pool"],
                "segment_pool_id": (0, 0),
                "is_expandable": expandable,
                "frames": [],
                "blocks": blocks,
            })
    return segments


def snapshot_dict(segments):
    """The dict of torch.cuda.memory._snapshot(): segments and one empty trace per device."""
    devices = 1 + max((s["device"] for s in segments), default=0)
    return {"segments": segments, "device_traces": [[] for _ in range(devices)]}


def dump(snapshot, path):
    """Writes `snapshot` (a snapshot_dict) as the pickle memory_viz opens."""
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=PICKLE_PROTOCOL)
