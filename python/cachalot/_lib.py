"""Finding and loading libcachalot.so, and the ctypes view of its C API (cachalot/cachalot.h,
cachalot/hooks.h).

The library is looked for, in order: the CACHALOT_LIBRARY environment variable (an override,
never needed); ``lib/libcachalot.so`` inside this package (``pip install ./python``); the
library directory recorded by ``cmake --install`` in ``_install_paths.py``. One library is
loaded per process and shared by everything in the package, so the default allocators that
cachalot.torch and cachalot.cupy install are the ones whose statistics the package reports.

The ctypes structures mirror the C structs field for field; tests/test_abi.py checks them
against the header and against the library (the size the library reports it filled).
"""
import ctypes
import os
import threading

SUCCESS = 0
OUT_OF_MEMORY = 1
INVALID_ARGUMENT = 2
INVALID_POINTER = 3
BACKEND = 4
NOT_SUPPORTED = 5
POOL_ASLEEP = 6

ALL_DEVICES = -1
MAX_DEVICES = 64


class CachalotError(RuntimeError):
    """A failed cachalot call; ``status`` is its C status (cachalot_status)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class OutOfMemoryError(CachalotError, MemoryError):
    """The device or the memory limit cannot satisfy an allocation."""


class InvalidArgumentError(CachalotError, ValueError):
    """A bad argument or config string (the message names the key or value)."""


class InvalidPointerError(CachalotError):
    """A pointer that is not a live allocation of the allocator."""


class BackendError(CachalotError):
    """A device call failed, or the device cannot start (no driver, no device)."""


class NotSupportedError(CachalotError):
    """Not available on this backend, in this build, or not implemented yet."""


class PoolAsleepError(CachalotError):
    """The memory pool is asleep (Allocator.sleep): allocating from it, or recording a stream
    on its blocks, is refused until it is woken."""


_ERRORS = {
    OUT_OF_MEMORY: OutOfMemoryError,
    INVALID_ARGUMENT: InvalidArgumentError,
    INVALID_POINTER: InvalidPointerError,
    BACKEND: BackendError,
    NOT_SUPPORTED: NotSupportedError,
    POOL_ASLEEP: PoolAsleepError,
}


class Stat(ctypes.Structure):
    """cachalot_stat: one quantity over time."""

    _fields_ = [("current", ctypes.c_uint64), ("peak", ctypes.c_uint64),
                ("allocated", ctypes.c_uint64), ("freed", ctypes.c_uint64)]


class PoolStats(ctypes.Structure):
    """cachalot_pool_stats: a quantity for both pools and each pool."""

    _fields_ = [("all", Stat), ("small_pool", Stat), ("large_pool", Stat)]


class DeviceCall(ctypes.Structure):
    """cachalot_device_call: the calls of one kind made to the device, and their time."""

    _fields_ = [("calls", ctypes.c_uint64), ("ns", ctypes.c_uint64)]


POOL_QUANTITIES = ("requested_bytes", "allocated_bytes", "reserved_bytes", "active_bytes",
                   "inactive_split_bytes", "allocations", "segments")
COUNTERS = ("num_allocs", "num_frees", "num_segment_allocs", "num_segment_frees", "num_ooms",
            "num_alloc_retries", "num_cache_flushes", "num_device_syncs", "num_oversize_allocs",
            "num_deferred_frees", "num_pending_blocks", "num_streams", "num_free_blocks",
            "largest_free_block", "num_use_after_free_writes", "max_split_size",
            "num_chunk_maps", "num_chunk_unmaps", "device_timing", "device_ns", "device_calls",
            "device_syncs", "device_implied_syncs", "device_implied_sync_ns")
# The kinds of device call (cachalot/device_cost.hpp), one cachalot_device_call call_<kind> each.
DEVICE_CALLS = ("segment_alloc", "segment_free", "range_reserve", "range_release", "chunk_create",
                "chunk_map", "chunk_access", "chunk_unmap", "chunk_release", "event_create",
                "event_record", "event_query", "event_sync", "stream_sync", "device_sync", "copy",
                "host_alloc", "host_free")
# Counters after the device calls (appended later).
TRAILING = ("num_gc_syncs",)
# The sleep and wake of memory pools (cachalot_pool_sleep), after the device calls.
SLEEP_FIELDS = ("sleep_pools_asleep", "sleep_bytes_asleep", "sleep_bytes_offloaded",
                "sleep_bytes_held", "sleep_num_sleeps", "sleep_num_pressure_sleeps",
                "sleep_num_wakes", "sleep_num_failed_sleeps", "sleep_num_failed_wakes", "sleep_ns",
                "wake_ns", "sleep_bytes_slept", "sleep_bytes_woken", "sleep_bytes_copied_out",
                "sleep_bytes_copied_in")


class Stats(ctypes.Structure):
    """cachalot_stats; ``size`` is set by the library to the bytes it filled."""

    _fields_ = ([("size", ctypes.c_uint64)] + [(q, PoolStats) for q in POOL_QUANTITIES] +
                [(c, ctypes.c_uint64) for c in COUNTERS] +
                [("call_" + k, DeviceCall) for k in DEVICE_CALLS] +
                [(c, ctypes.c_uint64) for c in TRAILING] +
                [(f, ctypes.c_uint64) for f in SLEEP_FIELDS])

    def filled(self, field):
        """True if the library filled `field` (an older library fills a prefix only)."""
        f = getattr(Stats, field)
        return f.offset + f.size <= self.size


# cachalot_reclaim_fn and cachalot_sleep_fn
RECLAIM_FN = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t)
SLEEP_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                            ctypes.c_size_t)

POOL_TENANT = 0
POOL_GRAPH = 1
SLEEP_OFFLOAD = 0
SLEEP_DISCARD = 1
SLEEP_REQUESTED = 0
SLEEP_ASLEEP = 1
SLEEP_CANCELLED = 2


class PoolOptions(ctypes.Structure):
    """cachalot_pool_options."""

    _fields_ = [("size", ctypes.c_size_t), ("name", ctypes.c_char_p), ("type", ctypes.c_int),
                ("limit", ctypes.c_size_t), ("guarantee", ctypes.c_size_t),
                ("priority", ctypes.c_int), ("reclaim", RECLAIM_FN),
                ("reclaim_context", ctypes.c_void_p), ("never_captured", ctypes.c_int),
                ("sleepable", ctypes.c_int), ("sleep_mode", ctypes.c_int),
                ("on_sleep", SLEEP_FN), ("sleep_context", ctypes.c_void_p)]


_c_char_p = ctypes.c_char_p
_c_void_p = ctypes.c_void_p
_c_size_t = ctypes.c_size_t
_c_int = ctypes.c_int
_status = ctypes.c_int

# name: (restype, argtypes)
_PROTOTYPES = {
    "cachalot_create": (_status, [_c_char_p, ctypes.POINTER(_c_void_p)]),
    "cachalot_destroy": (None, [_c_void_p]),
    "cachalot_malloc": (_status, [_c_void_p, ctypes.POINTER(_c_void_p), _c_size_t, _c_void_p]),
    "cachalot_free": (_status, [_c_void_p, _c_void_p, _c_void_p]),
    "cachalot_free_sized": (_status, [_c_void_p, _c_void_p, _c_size_t, _c_void_p]),
    "cachalot_record_stream": (_status, [_c_void_p, _c_void_p, _c_void_p]),
    "cachalot_empty_cache": (_status, [_c_void_p]),
    "cachalot_trim": (_status, [_c_void_p, _c_size_t]),
    "cachalot_get_stats": (_status, [_c_void_p, ctypes.POINTER(Stats)]),
    "cachalot_reset_peak_stats": (_status, [_c_void_p]),
    "cachalot_memory_summary": (_status, [_c_void_p, _c_char_p, _c_size_t,
                                          ctypes.POINTER(_c_size_t)]),
    "cachalot_memory_snapshot": (_status, [_c_void_p, _c_char_p, _c_size_t,
                                           ctypes.POINTER(_c_size_t)]),
    "cachalot_pool_create": (_status, [_c_void_p, ctypes.POINTER(PoolOptions),
                                       ctypes.POINTER(ctypes.c_uint64)]),
    "cachalot_pool_release": (_status, [_c_void_p, ctypes.c_uint64]),
    "cachalot_pool_begin_allocate": (_status, [_c_void_p, ctypes.c_uint64, _c_void_p]),
    "cachalot_pool_end_allocate": (_status, [_c_void_p, ctypes.c_uint64]),
    "cachalot_pool_malloc": (_status, [_c_void_p, ctypes.c_uint64, ctypes.POINTER(_c_void_p),
                                       _c_size_t, _c_void_p]),
    "cachalot_pool_sleep": (_status, [_c_void_p, ctypes.c_uint64, _c_int,
                                      ctypes.POINTER(_c_int)]),
    "cachalot_pool_wake": (_status, [_c_void_p, ctypes.c_uint64, ctypes.POINTER(_c_int)]),
    "cachalot_pool_is_asleep": (_status, [_c_void_p, ctypes.c_uint64, ctypes.POINTER(_c_int)]),
    "cachalot_pool_get_stats": (_status, [_c_void_p, ctypes.c_uint64, ctypes.POINTER(Stats)]),
    "cachalot_status_string": (_c_char_p, [_c_int]),
    "cachalot_last_error": (_c_char_p, []),
    "cachalot_default_configure": (_status, [_c_char_p]),
    "cachalot_default_set_memory_fraction": (_status, [_c_int, ctypes.c_double]),
    "cachalot_default_exists": (_c_int, [_c_int]),
    "cachalot_default_handle": (_status, [_c_int, ctypes.POINTER(_c_void_p)]),
    "cachalot_default_malloc": (_status, [_c_int, ctypes.POINTER(_c_void_p), _c_size_t,
                                          _c_void_p]),
    "cachalot_default_free": (_status, [_c_int, _c_void_p, _c_size_t, _c_void_p]),
    "cachalot_default_record_stream": (_status, [_c_void_p, _c_void_p]),
    "cachalot_default_empty_cache": (_status, [_c_int]),
    "cachalot_default_reset_peak_stats": (_status, [_c_int]),
    "cachalot_default_get_stats": (_status, [_c_int, ctypes.POINTER(Stats)]),
    "cachalot_default_memory_summary": (_status, [_c_int, _c_char_p, _c_size_t,
                                                  ctypes.POINTER(_c_size_t)]),
    "cachalot_default_memory_snapshot": (_status, [_c_int, _c_char_p, _c_size_t,
                                                   ctypes.POINTER(_c_size_t)]),
    "cachalot_torch_malloc": (_c_void_p, [_c_size_t, _c_int, _c_void_p]),
    "cachalot_torch_free": (None, [_c_void_p, _c_size_t, _c_int, _c_void_p]),
    "cachalot_torch_record_stream": (None, [_c_void_p, _c_void_p]),
    "cachalot_torch_empty_cache": (None, []),
    "cachalot_torch_set_memory_fraction": (None, [ctypes.c_double, _c_int]),
    "cachalot_torch_begin_allocate_to_pool": (_status, [_c_int, ctypes.c_uint64, ctypes.c_uint64,
                                                        _c_void_p, _c_void_p]),
    "cachalot_torch_end_allocate_to_pool": (_status, [_c_int, ctypes.c_uint64,
                                                      ctypes.c_uint64]),
    "cachalot_torch_release_pool": (_status, [_c_int, ctypes.c_uint64, ctypes.c_uint64]),
    "cachalot_cupy_malloc": (_c_void_p, [_c_void_p, _c_size_t, _c_int]),
    "cachalot_cupy_free": (None, [_c_void_p, _c_void_p, _c_int]),
}

_lock = threading.Lock()
_lib = None
_path = None


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def candidates():
    """The places looked at for libcachalot.so, in order, as (description, path)."""
    env = os.environ.get("CACHALOT_LIBRARY")
    if env:
        return [("CACHALOT_LIBRARY", env)]
    here = _package_dir()
    found = [("package", os.path.join(here, "lib", "libcachalot.so"))]
    try:
        from . import _install_paths  # written by cmake --install
        found.append(("cmake --install",
                      os.path.normpath(os.path.join(here, _install_paths.LIBRARY))))
    except ImportError:
        pass
    return found


def library_path():
    """The path of the libcachalot.so this package uses (found, not yet loaded)."""
    if _path is not None:
        return _path
    tried = []
    for how, path in candidates():
        if os.path.isfile(path):
            return os.path.realpath(path)
        tried.append(f"{how}: {path}")
    raise ImportError(
        "cachalot: libcachalot.so not found (tried " + "; ".join(tried) + "). Install the "
        "package with its library: 'pip install --no-build-isolation ./python' from the "
        "checkout, or 'cmake --install <build> --prefix P' and add P's site-packages "
        "directory to PYTHONPATH.")


def load():
    """The loaded library, with every entry point typed (loaded once per process)."""
    global _lib, _path
    with _lock:
        if _lib is None:
            path = library_path()
            lib = ctypes.CDLL(path)
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _path, _lib = path, lib
        return _lib


def error_for(status, context=None):
    """The Python exception for a failed C call (the thread's cachalot_last_error)."""
    lib = load()
    message = (lib.cachalot_last_error() or b"").decode(errors="replace")
    if not message:
        message = lib.cachalot_status_string(status).decode()
    if context:
        message = f"{context}: {message}"
    return _ERRORS.get(status, CachalotError)(status, message)


def check(status, context=None):
    """Raises the matching exception unless `status` is SUCCESS."""
    if status != SUCCESS:
        raise error_for(status, context)


def read_text(call, *args):
    """The text a C function writes with the copy-text convention (buf, capacity, needed)."""
    needed = _c_size_t(0)
    check(call(*args, None, 0, ctypes.byref(needed)))
    while True:
        capacity = needed.value + 4096  # room for growth between the two calls
        buf = ctypes.create_string_buffer(capacity)
        check(call(*args, buf, capacity, ctypes.byref(needed)))
        if needed.value <= capacity:
            return buf.value.decode()


def address(name):
    """The address of entry point `name` of the loaded library (for C++ extensions)."""
    return ctypes.cast(getattr(load(), name), ctypes.c_void_p).value
