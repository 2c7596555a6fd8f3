#!/usr/bin/env python3
"""Host cost of the Python layer of cachalot.cupy, per allocate+free pair, on the simulated
default allocator (no GPU, no CuPy): the malloc/free pair that cachalot.cupy.enable() gives
CuPy's PythonFunctionAllocator (with a stream getter returning a constant, as CuPy's
get_current_stream(device).ptr would) against the bare ctypes calls it wraps, measured in the
same run. CuPy's own objects (PythonFunctionAllocatorMemory, MemoryPointer) and its
get_current_stream() are not included. Prints medians of 7 runs of N pairs (a cache hit each).

    PYTHONPATH=python CACHALOT_LIBRARY=build/src/libcachalot.so python3 bench/python_overhead.py
"""
import ctypes
import os
import platform
import statistics
import time

os.environ.setdefault("CACHALOT_CONF", "backend:simulated,capacity:8GiB")
os.environ.setdefault("CACHALOT_LOG", "error")

import cachalot  # noqa: E402
from cachalot import _lib  # noqa: E402
from cachalot.cupy import allocator_functions  # noqa: E402

N = 100_000
SIZE = 1 << 20
STREAM = 0x100


def bare():
    lib = _lib.load()
    c_malloc, c_free = lib.cachalot_default_malloc, lib.cachalot_default_free
    out = ctypes.c_void_p()
    t0 = time.perf_counter()
    for _ in range(N):
        c_malloc(0, ctypes.byref(out), SIZE, STREAM)
        c_free(0, out.value, 0, STREAM)
    return (time.perf_counter() - t0) / N


def wrapped():
    malloc, free = allocator_functions(lambda device: STREAM, MemoryError)
    t0 = time.perf_counter()
    for _ in range(N):
        free(malloc(SIZE, 0), 0)
    return (time.perf_counter() - t0) / N


def main():
    cachalot.memory_stats(0)  # create the default allocator
    bare(), wrapped()  # warm up
    b = statistics.median(bare() for _ in range(7)) * 1e6
    w = statistics.median(wrapped() for _ in range(7)) * 1e6
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    print(f"bare ctypes malloc+free:          {b:.2f} us per pair")
    print(f"cachalot.cupy malloc+free:        {w:.2f} us per pair ({w / b:.2f}x)")
    print(f"Python layer added per pair:      {w - b:.2f} us")


if __name__ == "__main__":
    main()
