"""cachalot: a caching GPU memory allocator, from Python.

Drop it into a framework before the framework allocates on the GPU::

    import cachalot.torch
    cachalot.torch.enable()            # PyTorch: before the first CUDA tensor
    import cachalot.cupy
    cachalot.cupy.enable()             # CuPy

and read its numbers the way PyTorch presents its own: memory_stats() (the keys of
torch.cuda.memory_stats() where the meaning is the same, plus "cachalot.*"),
memory_summary(), memory_snapshot(), dump_snapshot(path) (a pickle for
pytorch.org/memory_viz), empty_cache(), reset_peak_memory_stats().

The functions of this module work on the process-wide default allocators, one per device,
which the framework hooks use; Allocator is an allocator of your own (cachalot_create).
Default allocators run on CUDA: without a usable driver they fail with an error naming the
cause, never silently on a simulated device (CACHALOT_CONF=backend:simulated asks for it).
"""
import threading

from . import _lib, _snapshot, _stats
from ._lib import (BackendError, CachalotError, InvalidArgumentError, InvalidPointerError,
                   NotSupportedError, OutOfMemoryError, PoolAsleepError)

__all__ = [
    "Allocator", "BackendError", "CachalotError", "InvalidArgumentError", "InvalidPointerError",
    "NotSupportedError", "OutOfMemoryError", "PoolAsleepError", "configure", "default_allocator",
    "dump_snapshot", "empty_cache", "library_path", "memory_snapshot", "memory_stats",
    "memory_summary", "raw_stats", "reset_peak_memory_stats", "set_memory_fraction", "snapshot",
]

__version__ = "0.1.0"


def library_path():
    """The path of the libcachalot.so in use."""
    _lib.load()
    return _lib.library_path()


def _device(device):
    if device is None:
        return 0
    index = getattr(device, "index", device)  # torch.device, cupy.cuda.Device (id) or int
    index = getattr(index, "id", index)
    if index is None:
        return 0
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"device must be an int or a device object, not {device!r}")
    return index


def configure(conf=None):
    """Sets the config of the default allocators before their first use ("key:value,...", the
    CACHALOT_CONF syntax; None: CACHALOT_CONF, checked now). A bad config raises
    InvalidArgumentError naming the key; so does another config once a default allocator
    exists (the same one again is accepted)."""
    lib = _lib.load()
    _lib.check(lib.cachalot_default_configure(None if conf is None else conf.encode()),
               "cachalot.configure")


def set_memory_fraction(fraction, device=None):
    """Limits the default allocator of `device` to `fraction` of the device memory; only
    before its first allocation (NotSupportedError after)."""
    lib = _lib.load()
    _lib.check(lib.cachalot_default_set_memory_fraction(_device(device), float(fraction)))


def raw_stats(device=None):
    """The cachalot_stats of the default allocator of `device`; zeros before its first
    allocation (reading creates nothing, so configure() stays open)."""
    s = _stats.new_stats()
    _lib.check(_lib.load().cachalot_default_get_stats(_device(device), _lib.ctypes.byref(s)))
    return s


def memory_stats(device=None):
    """The counters of the default allocator of `device` as a dict in the layout of
    torch.cuda.memory_stats() (see cachalot._stats for the keys)."""
    return _stats.to_dict(raw_stats(device))


def memory_summary(device=None):
    """The memory summary table of the default allocator of `device` (before its first
    allocation: zeros, and nothing is created)."""
    lib = _lib.load()
    return _lib.read_text(lib.cachalot_default_memory_summary, _device(device))


def empty_cache(device=None):
    """Returns the cached memory of the default allocators (all, or `device`'s) to the
    device."""
    lib = _lib.load()
    _lib.check(lib.cachalot_default_empty_cache(
        _lib.ALL_DEVICES if device is None else _device(device)))


def reset_peak_memory_stats(device=None):
    """Sets every peak of the default allocator of `device` to its current value."""
    _lib.check(_lib.load().cachalot_default_reset_peak_stats(_device(device)))


def _devices(device):
    if device is not None:
        return [_device(device)]
    lib = _lib.load()
    return [d for d in range(_lib.MAX_DEVICES) if lib.cachalot_default_exists(d)]


def memory_snapshot(device=None):
    """The segments of the default allocators (all existing ones, or `device`'s) in the layout
    of torch.cuda.memory_snapshot()."""
    lib = _lib.load()
    segments = []
    for d in _devices(device):
        segments += _snapshot.segments_from_json(
            _lib.read_text(lib.cachalot_default_memory_snapshot, d))
    return segments


def snapshot(device=None):
    """The dict of torch.cuda.memory._snapshot() for the default allocators."""
    return _snapshot.snapshot_dict(memory_snapshot(device))


def dump_snapshot(path="cachalot_snapshot.pickle", device=None):
    """Writes snapshot(device) as the pickle that pytorch.org/memory_viz opens."""
    _snapshot.dump(snapshot(device), path)


class Allocator:
    """An allocator of your own (cachalot_create), e.g. ``Allocator("memory_limit:8GiB")``.
    Pointers and streams are ints (a stream is a cudaStream_t; 0 is the default stream).
    close() (or the end of a ``with`` block) returns all of its memory."""

    def __init__(self, config=""):
        self._lib = _lib.load()
        handle = _lib.ctypes.c_void_p()
        _lib.check(self._lib.cachalot_create(config.encode(), _lib.ctypes.byref(handle)),
                   "cachalot.Allocator")
        self._handle = handle
        self._callbacks = []
        self._default = False  # default_allocator()'s objects: never destroyed

    def _h(self):
        if self._handle is None:
            raise InvalidArgumentError(_lib.INVALID_ARGUMENT, "cachalot.Allocator is closed")
        return self._handle

    def malloc(self, size, stream=0):
        """Allocates `size` bytes for work on `stream`; returns the address (0 for size 0)."""
        out = _lib.ctypes.c_void_p()
        _lib.check(self._lib.cachalot_malloc(self._h(), _lib.ctypes.byref(out), size, stream))
        return out.value or 0

    def free(self, ptr, stream=0, size=None):
        """Frees `ptr`, last used on `stream` (`size`: checked in checked mode)."""
        if size is None:
            _lib.check(self._lib.cachalot_free(self._h(), ptr, stream))
        else:
            _lib.check(self._lib.cachalot_free_sized(self._h(), ptr, size, stream))

    def record_stream(self, ptr, stream):
        """Marks the live allocation `ptr` as used by work on `stream`."""
        _lib.check(self._lib.cachalot_record_stream(self._h(), ptr, stream))

    def empty_cache(self):
        """Returns every unused cached segment to the device."""
        _lib.check(self._lib.cachalot_empty_cache(self._h()))

    def trim(self, target_bytes):
        """Returns cached segments until at most `target_bytes` stay reserved."""
        _lib.check(self._lib.cachalot_trim(self._h(), target_bytes))

    def reset_peak_memory_stats(self):
        """Sets every peak to its current value."""
        _lib.check(self._lib.cachalot_reset_peak_stats(self._h()))

    def raw_stats(self):
        """The filled cachalot_stats."""
        s = _stats.new_stats()
        _lib.check(self._lib.cachalot_get_stats(self._h(), _lib.ctypes.byref(s)))
        return s

    def memory_stats(self):
        """The counters in the layout of torch.cuda.memory_stats()."""
        return _stats.to_dict(self.raw_stats())

    def memory_summary(self):
        """The memory summary table."""
        return _lib.read_text(self._lib.cachalot_memory_summary, self._h())

    def memory_snapshot(self):
        """The segments in the layout of torch.cuda.memory_snapshot()."""
        return _snapshot.segments_from_json(
            _lib.read_text(self._lib.cachalot_memory_snapshot, self._h()))

    def snapshot(self):
        """The dict of torch.cuda.memory._snapshot()."""
        return _snapshot.snapshot_dict(self.memory_snapshot())

    def dump_snapshot(self, path="cachalot_snapshot.pickle"):
        """Writes snapshot() as the pickle that pytorch.org/memory_viz opens."""
        _snapshot.dump(self.snapshot(), path)

    # --- memory pools and their sleep (cachalot/pool.hpp) ---------------------------------

    def create_pool(self, name="", priority=0, limit=0, guarantee=0, sleepable=False,
                    sleep_mode="offload", on_sleep=None):
        """Creates a tenant pool; returns its id. `sleepable` (expandable segments only) lets
        the allocator put it to sleep in `sleep_mode` when a higher-priority pool would run out
        of memory; `on_sleep(pool, notice, nbytes)` is then asked first (notice "requested":
        return True to allow it) and told after ("asleep", or "cancelled")."""
        o = _lib.PoolOptions()
        o.size = _lib.ctypes.sizeof(o)
        o.name = name.encode()
        o.type = _lib.POOL_TENANT
        o.limit, o.guarantee, o.priority = limit, guarantee, priority
        o.sleepable = 1 if sleepable else 0
        o.sleep_mode = _mode(sleep_mode)
        if on_sleep is not None:
            names = {_lib.SLEEP_REQUESTED: "requested", _lib.SLEEP_ASLEEP: "asleep",
                     _lib.SLEEP_CANCELLED: "cancelled"}

            def trampoline(_ctx, pool, notice, nbytes):
                try:
                    return 1 if on_sleep(pool, names.get(notice, notice), nbytes) else 0
                except Exception:  # never across the C boundary: refuse the sleep
                    return 0

            o.on_sleep = _lib.SLEEP_FN(trampoline)
            self._callbacks.append(o.on_sleep)  # kept alive as long as the allocator
        out = _lib.ctypes.c_uint64()
        _lib.check(self._lib.cachalot_pool_create(self._h(), _lib.ctypes.byref(o),
                                                  _lib.ctypes.byref(out)), "create_pool")
        return out.value

    def release_pool(self, pool):
        """Drops the pool's reference (its memory goes back once its blocks are freed)."""
        _lib.check(self._lib.cachalot_pool_release(self._h(), pool))

    def begin_allocate(self, pool, stream):
        """Routes this allocator's allocations on `stream` (from any thread) to `pool` until
        end_allocate(pool); routes nest, the most recent first."""
        _lib.check(self._lib.cachalot_pool_begin_allocate(self._h(), pool, stream))

    def end_allocate(self, pool):
        """Ends the most recent route into `pool`."""
        _lib.check(self._lib.cachalot_pool_end_allocate(self._h(), pool))

    def pool_malloc(self, pool, size, stream=0):
        """Allocates `size` bytes from `pool` for work on `stream`; returns the address."""
        out = _lib.ctypes.c_void_p()
        _lib.check(self._lib.cachalot_pool_malloc(self._h(), pool, _lib.ctypes.byref(out), size,
                                                  stream))
        return out.value or 0

    def sleep(self, pool, mode="offload"):
        """Puts tenant pool `pool` (expandable segments) to sleep: waits for its streams,
        keeps its live bytes on the host ("offload") or not ("discard"), and gives all its
        device memory back; its blocks stay allocated at the same addresses. Returns False if
        it was asleep already. Raises PoolAsleepError for allocations from it until wake()."""
        did = _lib.ctypes.c_int()
        _lib.check(self._lib.cachalot_pool_sleep(self._h(), pool, _mode(mode),
                                                 _lib.ctypes.byref(did)))
        return bool(did.value)

    def wake(self, pool):
        """Maps memory behind a sleeping pool's blocks again, at the same addresses, and copies
        offloaded bytes back. Returns False if it was awake. OutOfMemoryError (naming the pool)
        leaves it asleep."""
        did = _lib.ctypes.c_int()
        _lib.check(self._lib.cachalot_pool_wake(self._h(), pool, _lib.ctypes.byref(did)))
        return bool(did.value)

    def is_asleep(self, pool):
        """True while `pool` is asleep (or going to sleep, or waking)."""
        out = _lib.ctypes.c_int()
        _lib.check(self._lib.cachalot_pool_is_asleep(self._h(), pool, _lib.ctypes.byref(out)))
        return bool(out.value)

    def asleep(self, pool, mode="offload"):
        """A context manager: the pool sleeps inside the ``with`` block and is woken at its end
        (also when the block raises). ``with alloc.asleep(batch): serve_critical()``."""
        return _Asleep(self, pool, mode)

    def pool_stats(self, pool):
        """The counters of one pool, in the layout of memory_stats()."""
        s = _stats.new_stats()
        _lib.check(self._lib.cachalot_pool_get_stats(self._h(), pool, _lib.ctypes.byref(s)))
        return _stats.to_dict(s)

    def close(self):
        """Destroys the allocator (its memory goes back to the device). Idempotent. Does
        nothing on default_allocator()'s object: default allocators are never destroyed."""
        if self._handle is not None and not self._default:
            self._lib.cachalot_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


_defaults = {}  # device -> default_allocator()
_defaults_lock = threading.Lock()


def default_allocator(device=None):
    """The default allocator of `device` (the one behind memory_stats() and the framework
    hooks: cachalot.torch, cachalot.cupy), created if needed, as an Allocator: its pools,
    sleep and wake. close() does nothing on it."""
    d = _device(device)
    with _defaults_lock:
        a = _defaults.get(d)
        if a is None:
            lib = _lib.load()
            handle = _lib.ctypes.c_void_p()
            _lib.check(lib.cachalot_default_handle(d, _lib.ctypes.byref(handle)),
                       "cachalot.default_allocator")
            a = Allocator.__new__(Allocator)
            a._lib, a._handle, a._callbacks, a._default = lib, handle, [], True
            _defaults[d] = a
    return a


def _mode(mode):
    """A sleep mode by name ("offload", "discard") as its C value."""
    modes = {"offload": _lib.SLEEP_OFFLOAD, "discard": _lib.SLEEP_DISCARD}
    if mode not in modes:
        raise InvalidArgumentError(_lib.INVALID_ARGUMENT,
                                   f"unknown sleep mode {mode!r} ('offload' or 'discard')")
    return modes[mode]


class _Asleep:
    """Allocator.asleep(): sleep on entry, wake on exit."""

    def __init__(self, allocator, pool, mode):
        self._a, self._pool, self._mode = allocator, pool, mode
        self.slept = False

    def __enter__(self):
        self.slept = self._a.sleep(self._pool, self._mode)
        return self

    def __exit__(self, *exc):
        if self.slept:
            self._a.wake(self._pool)
        return False
