#!/usr/bin/env python3
"""CuPy with cachalot as its memory allocator (cupy.cuda.memory.CFunctionAllocator).

CuPy passes no stream to its allocator, so the cachalot CuPy hooks allocate and free on the
default stream (see docs/cuda.md). Loads libcachalot.so (CACHALOT_LIBRARY, or a build folder
of this repository), installs the hooks, runs a few array operations and prints cachalot's
counters and summary. Exits 77 (skipped) without cupy, without a GPU, or without the library.
"""
import ctypes
import sys

from _cachalot_lib import SKIP, find_library, load, stats, summary


def main():
    try:
        import cupy
    except ImportError:
        print("skipped: cupy is not installed")
        return SKIP
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no device")
    except Exception as e:  # cupy raises CUDARuntimeError without a driver
        print(f"skipped: no CUDA device visible to cupy ({e})")
        return SKIP
    path = find_library()
    if path is None:
        print("skipped: libcachalot.so not found (set CACHALOT_LIBRARY)")
        return SKIP

    lib = load(path)
    malloc_fn = ctypes.cast(lib.cachalot_cupy_malloc, ctypes.c_void_p).value
    free_fn = ctypes.cast(lib.cachalot_cupy_free, ctypes.c_void_p).value
    allocator = cupy.cuda.memory.CFunctionAllocator(0, malloc_fn, free_fn, lib)
    cupy.cuda.set_allocator(allocator.malloc)

    a = cupy.random.rand(2048, 2048, dtype=cupy.float32)
    for _ in range(5):
        b = a @ a.T
        a = b / cupy.linalg.norm(b)
    total = float(a.sum())
    cupy.cuda.Device().synchronize()
    print(f"result {total:.6f}")

    device = cupy.cuda.Device().id
    s = stats(lib, device)
    print(f"cachalot: {s.num_allocs} allocations, {s.allocated_bytes} B allocated, "
          f"{s.reserved_bytes} B reserved, {s.num_segment_allocs} cudaMalloc calls")
    print(summary(lib, device))
    del a, b
    cupy.cuda.set_allocator(None)
    if s.num_allocs == 0:
        print("error: CuPy did not allocate through cachalot")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
