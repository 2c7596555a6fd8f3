"""cachalot's counters in the layout of torch.cuda.memory_stats().

Keys are those of PyTorch's dict where the meaning is the same (read from PyTorch's
torch/csrc/cuda/Module.cpp, memoryStats, and torch/cuda/memory.py, memory_stats):
``{allocated_bytes,reserved_bytes,active_bytes,requested_bytes,inactive_split_bytes,
allocation,segment}.{all,small_pool,large_pool}.{current,peak,allocated,freed}``,
``num_alloc_retries``, ``num_ooms``, ``num_device_alloc``, ``num_device_free`` and
``max_split_size`` (-1 when unset, as PyTorch's int64 cast of SIZE_MAX). PyTorch keys that
cachalot does not count with the same meaning are absent: ``active.*`` and
``inactive_split.*`` (block counts), ``oversize_allocations.*``, ``oversize_segments.*``,
``num_sync_all_streams``, ``num_oom_rejections``, ``reserved_bytes_by_private_pools``.
cachalot's own counters are under ``cachalot.<name>`` (the fields of cachalot_stats); the device
calls of each kind under ``cachalot.call_<kind>.calls`` and ``cachalot.call_<kind>.ns``; the
sleep and wake of memory pools under ``cachalot.sleep_<name>`` (and ``cachalot.wake_ns``).
"""
import collections

from . import _lib

# torch key -> cachalot_stats field
_POOL_KEYS = (
    ("allocated_bytes", "allocated_bytes"),
    ("reserved_bytes", "reserved_bytes"),
    ("active_bytes", "active_bytes"),
    ("requested_bytes", "requested_bytes"),
    ("inactive_split_bytes", "inactive_split_bytes"),
    ("allocation", "allocations"),
    ("segment", "segments"),
)
_POOLS = ("all", "small_pool", "large_pool")
_METRICS = ("current", "peak", "allocated", "freed")
_SCALAR_KEYS = (
    ("num_alloc_retries", "num_alloc_retries"),
    ("num_ooms", "num_ooms"),
    ("num_device_alloc", "num_segment_allocs"),
    ("num_device_free", "num_segment_frees"),
)
_UINT64_MAX = (1 << 64) - 1


def to_dict(s):
    """A sorted dict (like torch.cuda.memory_stats) from a filled _lib.Stats."""
    out = {}
    for key, field in _POOL_KEYS:
        if not s.filled(field):
            continue
        pool_stats = getattr(s, field)
        for pool in _POOLS:
            stat = getattr(pool_stats, pool)
            for metric in _METRICS:
                out[f"{key}.{pool}.{metric}"] = getattr(stat, metric)
    for key, field in _SCALAR_KEYS:
        if s.filled(field):
            out[key] = getattr(s, field)
    if s.filled("max_split_size"):
        out["max_split_size"] = -1 if s.max_split_size == _UINT64_MAX else s.max_split_size
    for field in _lib.COUNTERS:
        if s.filled(field):
            out[f"cachalot.{field}"] = getattr(s, field)
    for kind in _lib.DEVICE_CALLS:
        if s.filled("call_" + kind):
            call = getattr(s, "call_" + kind)
            out[f"cachalot.call_{kind}.calls"] = call.calls
            out[f"cachalot.call_{kind}.ns"] = call.ns
    for field in _lib.TRAILING + _lib.SLEEP_FIELDS:
        if s.filled(field):
            out[f"cachalot.{field}"] = getattr(s, field)
    return collections.OrderedDict(sorted(out.items()))


def new_stats():
    """An empty _lib.Stats with its size set."""
    s = _lib.Stats()
    s.size = _lib.ctypes.sizeof(s)
    return s
