"""cachalot as CuPy's memory allocator.

    import cachalot.cupy
    cachalot.cupy.enable()
    x = cupy.zeros(1 << 20)          # served by cachalot on CuPy's current stream

enable() installs a cupy.cuda.memory.PythonFunctionAllocator whose malloc calls
cachalot_default_malloc on CuPy's current stream of the device and raises
cupy.cuda.memory.OutOfMemoryError (with cachalot's message appended) when cachalot cannot
allocate, or a cachalot.CachalotError for any other failure. CuPy's PythonFunctionAllocator
turns a raised exception into a failed allocation (cupy/cuda/memory.pyx:
PythonFunctionAllocatorMemory calls malloc_func in its constructor and frees only a nonzero
pointer), whereas its CFunctionAllocator would keep a NULL as the array's pointer. The free
function frees on the device's current stream (cachalot defers reuse when that is not the
allocation's stream) and never raises (CuPy calls it from __dealloc__); a failure is printed on
stderr.

With per-thread default streams (CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1) CuPy's default stream is
cudaStreamPerThread (0x2) on every thread (cupy/cuda/stream.pyx: Stream(ptds=True).ptr), a
different stream on each: cachalot serves it on the first thread that allocates on it, refuses
allocations on it from other threads (cachalot.NotSupportedError, saying so; give those threads
a cupy.cuda.Stream() of their own) and serves their frees after waiting for their stream.

Cost per allocation, on top of CuPy's own: one Python call, one
cupy.cuda.get_current_stream() and one ctypes call into cachalot (and the same for the free);
docs/usage.md gives the measured figure.
"""
import ctypes
import sys
import threading

import cachalot
from . import _lib

__all__ = ["enable", "enabled", "allocator_functions"]

_lock = threading.Lock()
_installed = None


def _import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError("cachalot.cupy: CuPy is not installed") from e
    return cupy


def allocator_functions(get_stream, out_of_memory_error):
    """The (malloc, free) pair for PythonFunctionAllocator: malloc(size, device) -> pointer and
    free(pointer, device). `get_stream(device)` gives the current stream handle (an int) of a
    device; `out_of_memory_error(size, allocated, limit)` builds the framework's out-of-memory
    exception. Exposed so that the tests can drive them without CuPy."""
    lib = _lib.load()
    c_malloc = lib.cachalot_default_malloc
    c_free = lib.cachalot_default_free
    c_void_p, byref = ctypes.c_void_p, ctypes.byref

    def malloc(size, device, _c_malloc=c_malloc):
        out = c_void_p()
        status = _c_malloc(device, byref(out), size, get_stream(device))
        if status == _lib.SUCCESS:
            return out.value or 0
        error = _lib.error_for(status, "cachalot.cupy")
        if status != _lib.OUT_OF_MEMORY:
            raise error
        try:
            allocated = cachalot.raw_stats(device).allocated_bytes.all.current
        except cachalot.CachalotError:
            allocated = -1
        oom = out_of_memory_error(size, allocated, 0)
        oom.args = (f"{oom.args[0] if oom.args else ''} {error}".strip(),)
        raise oom from error

    def free(ptr, device, _c_free=c_free, _stderr=sys.stderr):
        try:
            status = _c_free(device, ptr, 0, get_stream(device))
            if status != _lib.SUCCESS:
                _stderr.write(f"cachalot [error] cachalot.cupy free: {_lib.error_for(status)}\n")
        except Exception as e:  # noqa: BLE001 -- __dealloc__ must not raise
            try:
                _stderr.write(f"cachalot [error] cachalot.cupy free: {e}\n")
            except Exception:  # noqa: BLE001 -- interpreter shutdown
                pass

    return malloc, free


def _stream_getter(cupy):
    """stream(device) -> the handle of CuPy's current stream of `device` (CuPy versions whose
    get_current_stream takes no device give the current device's)."""
    get_current_stream = cupy.cuda.get_current_stream
    takes_device = [True]

    def stream(device):
        if takes_device[0]:
            try:
                return get_current_stream(device).ptr
            except TypeError:
                takes_device[0] = False
        return get_current_stream().ptr

    return stream


def enable(conf=None):
    """Makes cachalot CuPy's allocator (cupy.cuda.set_allocator). `conf`: the default
    allocators' config ("key:value,..."; None: CACHALOT_CONF). Calling it again with the same
    config does nothing. Raises ImportError without CuPy, InvalidArgumentError for a bad config,
    NotSupportedError for a CuPy without PythonFunctionAllocator."""
    global _installed
    cupy = _import_cupy()
    memory = cupy.cuda.memory
    with _lock:
        cachalot.configure(conf)
        if _installed is not None:
            return
        if not hasattr(memory, "PythonFunctionAllocator"):
            raise cachalot.NotSupportedError(
                _lib.NOT_SUPPORTED, "cachalot.cupy.enable() needs a CuPy with "
                "cupy.cuda.memory.PythonFunctionAllocator (its CFunctionAllocator does not "
                "check for a failed allocation)")
        malloc, free = allocator_functions(_stream_getter(cupy), memory.OutOfMemoryError)
        allocator = memory.PythonFunctionAllocator(malloc, free)
        cupy.cuda.set_allocator(allocator.malloc)
        _installed = allocator


def enabled():
    """True once enable() has installed cachalot in this process."""
    return _installed is not None
