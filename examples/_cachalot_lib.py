"""Finds and wraps libcachalot.so for the Python examples (shared helper, not an API).

The library is CACHALOT_LIBRARY if set, else the first libcachalot.so found in the usual
build folders of this repository (build*/src, build-gpu/lib). SKIP (77) is the exit code the
examples use when torch/cupy or a GPU is missing, which CTest reports as "skipped".
"""
import ctypes
import glob
import os

SKIP = 77

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_library():
    """Absolute path of libcachalot.so, or None."""
    env = os.environ.get("CACHALOT_LIBRARY")
    if env:
        return os.path.realpath(env)
    patterns = ["build-gpu/lib/libcachalot.so", "build*/src/libcachalot.so"]
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(_REPO, pattern))):
            return os.path.realpath(path)
    return None


class CachalotStats(ctypes.Structure):
    """Mirror of cachalot_stats (cachalot/cachalot.h): 20 uint64 counters, in order."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "requested_bytes", "requested_bytes_peak", "allocated_bytes", "allocated_bytes_peak",
        "reserved_bytes", "reserved_bytes_peak", "active_bytes", "active_bytes_peak",
        "inactive_split_bytes", "num_allocs", "num_frees", "num_segment_allocs",
        "num_segment_frees", "num_ooms", "num_alloc_retries", "num_cache_flushes",
        "largest_free_block", "num_live_allocations", "num_segments",
        "num_use_after_free_writes")]


def load(path):
    """ctypes handle on the library with the default-allocator calls typed."""
    lib = ctypes.CDLL(path)
    lib.cachalot_default_get_stats.argtypes = [ctypes.c_int, ctypes.POINTER(CachalotStats)]
    lib.cachalot_default_get_stats.restype = ctypes.c_int
    lib.cachalot_default_memory_summary.argtypes = [
        ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.cachalot_default_memory_summary.restype = ctypes.c_int
    lib.cachalot_last_error.restype = ctypes.c_char_p
    return lib


def stats(lib, device=0):
    """The counters of the default allocator of `device`, as a CachalotStats."""
    out = CachalotStats()
    status = lib.cachalot_default_get_stats(device, ctypes.byref(out))
    if status != 0:
        raise RuntimeError(lib.cachalot_last_error().decode())
    return out


def summary(lib, device=0):
    """The memory summary table of the default allocator of `device`."""
    needed = ctypes.c_size_t(0)
    if lib.cachalot_default_memory_summary(device, None, 0, ctypes.byref(needed)) != 0:
        raise RuntimeError(lib.cachalot_last_error().decode())
    buf = ctypes.create_string_buffer(needed.value)
    lib.cachalot_default_memory_summary(device, buf, needed.value, None)
    return buf.value.decode()
